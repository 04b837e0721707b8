package coordinator

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// balanceRules are a tenant's rules of every kind the balance shows or
// leaves out.
func balanceRules() []rules.Rule {
	return []rules.Rule{
		// Shown: keyed by the tenant; acme gets an override from the API.
		{Name: "daily-calls", Scope: rules.Tenant, Algorithm: algo.FixedWindow, Limit: 100_000, Period: 24 * time.Hour, Intent: lease.Quota},
		// Shown: its limit is the plan's, which needs the plan.
		{Name: "plan-calls", Scope: rules.Tenant, Algorithm: algo.FixedWindow, Limit: 50_000, Period: 24 * time.Hour, Intent: lease.Quota,
			Plans: map[string]rules.Plan{"pro": {Limit: 200_000}}},
		// Shown: the rule file sets initech's limit, not acme's.
		{Name: "hourly-calls", Scope: rules.Tenant, Algorithm: algo.FixedWindow, Limit: 10_000, Period: time.Hour, Intent: lease.Quota,
			Tenants: map[string]rules.TenantOverride{"initech": {Limit: 20}}},
		// Shown: a month on the calendar; acme's override anchors its
		// cycle on the 17th in New York.
		{Name: "monthly-calls", Scope: rules.Tenant, Algorithm: algo.FixedWindow, Limit: 1_000_000, Period: algo.Month.Nominal(), Intent: lease.Quota,
			Cycle: &rules.Cycle{Unit: algo.Month}},
		// Left out: a global rule's limit is the whole service's.
		{Name: "service", Scope: rules.Global, Algorithm: algo.TokenBucket, Limit: 1_000_000, Period: time.Second, Intent: lease.Capacity},
		// Left out: keyed by user.
		{Name: "per-user", Scope: rules.User, Algorithm: algo.FixedWindow, Limit: 1_000_000, Period: time.Hour, Intent: lease.Quota},
		// Left out: a rate shorter than the ledger's billing window.
		{Name: "burst", Scope: rules.Tenant, Algorithm: algo.TokenBucket, Limit: 1_000_000, Period: 500 * time.Millisecond, Intent: lease.Capacity},
	}
}

// TestBalanceOnFollower: a real agent admits acme's requests and reports
// them; a follower answers acme's balance from its memory, over gRPC and
// HTTP: the limit in force (the override's, the plan's given the plan),
// what was used this cycle, what remains, and when the cycle renews.
func TestBalanceOnFollower(t *testing.T) {
	nodes := cluster(t, 3, func(c *Config) { c.BillingWindow = time.Second })
	l := waitLeader(t, nodes)
	var f *Coordinator
	for _, c := range nodes {
		if c != l {
			f = c
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc := dial(t, f.GRPCAddr())
	req := &allotpb.PutRulesRequest{ReplaceAll: true}
	for _, r := range balanceRules() {
		req.Rules = append(req.Rules, rulespb.ToProto(&r))
	}
	if _, err := allotpb.NewRulesServiceClient(cc).PutRules(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := allotpb.NewOverridesServiceClient(cc).PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{
		{Rule: "daily-calls", Tenant: "acme", Limit: 150_000},
		{Rule: "monthly-calls", Tenant: "acme", Cycle: &allotpb.Anchor{AnchorDay: 17, TimeZone: "America/New_York"}},
	}}); err != nil {
		t.Fatal(err)
	}

	var addrs []string
	for _, c := range nodes {
		addrs = append(addrs, c.GRPCAddr())
	}
	a, err := agent.New(agent.Config{Coordinators: addrs, NodeID: "gw-1", Region: "eu-west", ReportInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.Close(ctx)
	})
	select {
	case <-a.Ready():
	case <-ctx.Done():
		t.Fatal("the agent got no rules")
	}
	testwait.For(t, 10*time.Second, "the agent to hold the cluster's rules", func() bool { return a.Rules().Len() == len(balanceRules()) })
	began := time.Now()
	const n = 37
	for i := 0; i < n; i++ {
		if d := a.Check(agent.Request{Tenant: "acme", Plan: "pro", User: "u1"}); !d.Allowed {
			t.Fatalf("request %d refused by %s", i, d.Rule)
		}
	}

	bal := allotpb.NewBalanceServiceClient(cc)
	var got *allotpb.BalanceResponse
	testwait.For(t, 20*time.Second, "the follower to count acme's requests", func() bool {
		got, err = bal.GetBalance(ctx, &allotpb.BalanceRequest{Tenant: "acme", Plan: "pro"})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range got.GetRules() {
			if r.GetUsed() != n {
				return false
			}
		}
		return len(got.GetRules()) == 4
	})
	want := map[string]struct {
		limit  int64
		from   string
		period time.Duration
	}{
		"daily-calls":   {150_000, "override", 24 * time.Hour},
		"plan-calls":    {200_000, "plan", 24 * time.Hour},
		"hourly-calls":  {10_000, "rule", time.Hour},
		"monthly-calls": {1_000_000, "rule", algo.Month.Nominal()},
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	acmeMonth := algo.Calendar{Unit: algo.Month, Anchor: 17, Location: ny}
	for _, r := range got.GetRules() {
		w, ok := want[r.GetRule()]
		if !ok {
			t.Errorf("rule %s in acme's balance", r.GetRule())
			continue
		}
		start, end := r.GetCycleStart().AsTime(), r.GetRenewsAt().AsTime()
		if start.After(began) {
			t.Skipf("%s's cycle renewed while the test ran (at %s): its count started again", r.GetRule(), start)
		}
		if r.Limit == nil || r.GetLimit() != w.limit || r.GetLimitFrom() != w.from || r.GetRemaining() != uint64(w.limit-n) {
			t.Errorf("%s: limit %v from %q, remaining %v; want %d from %q, remaining %d", r.GetRule(), r.Limit, r.GetLimitFrom(), r.Remaining, w.limit, w.from, w.limit-n)
		}
		if r.GetRule() == "monthly-calls" {
			// acme's own month: from the 17th at midnight in New York.
			if ws := acmeMonth.Start(began); !start.Equal(ws) || !end.Equal(acmeMonth.Next(ws)) {
				t.Errorf("monthly-calls: cycle %s to %s; want acme's month from %s to %s", start, end, ws, acmeMonth.Next(ws))
			}
		} else if end.Sub(start) != w.period || r.GetPeriod().AsDuration() != w.period || start.UnixNano()%int64(w.period) != 0 {
			t.Errorf("%s: cycle %s to %s, period %s; want %s aligned on its multiples", r.GetRule(), start, end, r.GetPeriod().AsDuration(), w.period)
		}
		if !r.GetComplete() || !r.GetCountedFrom().AsTime().Equal(start) || r.GetOverage() != 0 {
			t.Errorf("%s: complete %v, counted from %s, overage %d; want the whole cycle counted", r.GetRule(), r.GetComplete(), r.GetCountedFrom().AsTime(), r.GetOverage())
		}
	}

	// Without the plan, plan-calls' limit is not known: it is shown with
	// what was used alone.
	noPlan, err := bal.GetBalance(ctx, &allotpb.BalanceRequest{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range noPlan.GetRules() {
		if r.GetRule() == "plan-calls" && (r.Limit != nil || r.Remaining != nil || r.GetLimitFrom() != "" || r.GetUsed() != n) {
			t.Errorf("plan-calls without a plan: limit %v, remaining %v, from %q, used %d; want no limit and %d used", r.Limit, r.Remaining, r.GetLimitFrom(), r.GetUsed(), n)
		}
	}

	// The same over HTTP, on the follower.
	resp, err := http.Get("http://" + f.HTTPAddr() + "/v1/balance?tenant=acme&plan=pro")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var doc struct {
		Tenant string
		Rules  []struct {
			Rule, Limit, Used, Remaining, Overage string
			RenewsAt                              time.Time `json:"renews_at"`
		}
	}
	if err := json.Unmarshal(body, &doc); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/balance: %d %s (%v)", resp.StatusCode, body, err)
	}
	if doc.Tenant != "acme" || len(doc.Rules) != 4 || doc.Rules[0].Rule != "daily-calls" || doc.Rules[0].Limit != "150000" ||
		doc.Rules[0].Used != "37" || doc.Rules[0].Remaining != "149963" || doc.Rules[0].Overage != "0" || doc.Rules[0].RenewsAt.IsZero() {
		t.Errorf("GET /v1/balance: %s", body)
	}

	// A tenant with no usage has its limits and nothing used: the
	// coordinators keep no list of tenants to say it does not exist.
	other, err := bal.GetBalance(ctx, &allotpb.BalanceRequest{Tenant: "initech"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range other.GetRules() {
		if r.GetUsed() != 0 || (r.GetRule() == "hourly-calls" && (r.GetLimit() != 20 || r.GetLimitFrom() != "tenant")) {
			t.Errorf("initech's %s: used %d, limit %d from %q", r.GetRule(), r.GetUsed(), r.GetLimit(), r.GetLimitFrom())
		}
	}
	if _, err := bal.GetBalance(ctx, &allotpb.BalanceRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a balance without a tenant: %v, want InvalidArgument", err)
	}
}

// TestBalanceTenantCredential: a balance credential (a token, or a
// certificate naming the role) reads its own tenant's balance and nothing
// else. Another tenant's balance is refused alike whether that tenant has
// usage or none, over gRPC and HTTP, so the refusal tells nothing of who
// else is a customer.
func TestBalanceTenantCredential(t *testing.T) {
	// Billing windows of a second: plan-quota's minute is a cycle the
	// ledger counts.
	s := newSecured(t, 1, func(c *Config) { c.BillingWindow = time.Second })
	l := s.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := tlsConn(t, l.GRPCAddr(), s.ca.File, nil)
	if _, err := allotpb.NewRulesServiceClient(cc).PutRules(withToken(ctx, s.tokens["admin"]), &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{quotaRule}}); err != nil {
		t.Fatal(err)
	}
	rep := usageReport("gw-1", "eu-west", 1)
	rep.Usage.Counts = append(rep.Usage.Counts, &allotpb.UsageCount{Rule: "plan-quota", Tenant: "initech", WindowUnix: rep.Usage.Counts[0].WindowUnix, Admitted: 3})
	if _, err := allotpb.NewAgentServiceClient(cc).Report(withToken(ctx, s.tokens["agent"]), rep); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "initech's line in the ledger", func() bool { return strings.Contains(ledgerText(l), "initech") })

	cert := s.issue(t, auth.Leaf{File: "dash-cert", Role: auth.Balance, Name: "acme"})
	certConn := tlsConn(t, l.GRPCAddr(), s.ca.File, &cert)
	bal := func(conn *grpc.ClientConn, token, tenant string) (*allotpb.BalanceResponse, error) {
		c := ctx
		if token != "" {
			c = withToken(ctx, s.tokens[token])
		}
		return allotpb.NewBalanceServiceClient(conn).GetBalance(c, &allotpb.BalanceRequest{Tenant: tenant})
	}
	var refusals []string
	for _, tc := range []struct {
		name, token, tenant string
		conn                *grpc.ClientConn
		want                codes.Code
	}{
		{"own tenant", "dash", "acme", cc, codes.OK},
		{"a tenant with usage", "dash", "initech", cc, codes.PermissionDenied},
		{"a tenant with none", "dash", "nobody-at-all", cc, codes.PermissionDenied},
		{"no tenant", "dash", "", cc, codes.InvalidArgument},
		{"certificate, own tenant", "", "acme", certConn, codes.OK},
		{"certificate, a tenant with usage", "", "initech", certConn, codes.PermissionDenied},
		{"certificate, a tenant with none", "", "nobody-at-all", certConn, codes.PermissionDenied},
		{"reader, any tenant", "reader", "initech", cc, codes.OK},
		{"admin, any tenant", "admin", "nobody-at-all", cc, codes.OK},
		{"agent", "agent", "acme", cc, codes.PermissionDenied},
		{"no credential", "", "acme", cc, codes.Unauthenticated},
	} {
		resp, err := bal(tc.conn, tc.token, tc.tenant)
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			continue
		}
		if tc.want == codes.PermissionDenied && tc.token != "agent" {
			refusals = append(refusals, status.Convert(err).Message())
		}
		if tc.want == codes.OK && (resp.GetTenant() != tc.tenant || len(resp.GetRules()) != 1) {
			t.Errorf("%s: %v", tc.name, resp)
		}
	}
	for _, m := range refusals[1:] {
		if m != refusals[0] {
			t.Errorf("refusals differ: %q and %q", refusals[0], m)
		}
	}
	if _, err := allotpb.NewUsageServiceClient(cc).QueryUsage(withToken(ctx, s.tokens["dash"]), &allotpb.UsageQuery{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("the ledger read with a balance token: %v, want PermissionDenied", err)
	}
	if n := testutil.ToFloat64(l.metrics.authRefusals.WithLabelValues("GetBalance", authz.ReasonWrongTenant)); n != 4 {
		t.Errorf("%v refusals of GetBalance counted as %s, want 4", n, authz.ReasonWrongTenant)
	}

	// Over HTTP: the same status and the same body for a tenant with
	// usage and one with none.
	r, err := auth.NewReloader(auth.TLSFiles{CAFile: s.ca.File}, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: r.ClientConfig()}, Timeout: 10 * time.Second}
	get := func(token, query string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+l.HTTPAddr()+"/v1/balance"+query, nil)
		req.Header.Set("Authorization", "Bearer "+s.tokens[token])
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code1, body1 := get("dash", "?tenant=initech")
	code2, body2 := get("dash", "?tenant=nobody-at-all")
	if code1 != http.StatusForbidden || code2 != http.StatusForbidden || body1 != body2 {
		t.Errorf("another tenant's balance over HTTP: %d %q and %d %q, want 403 alike", code1, body1, code2, body2)
	}
	if code, body := get("dash", "?tenant=acme"); code != http.StatusOK || !strings.Contains(body, `"tenant":"acme"`) {
		t.Errorf("acme's balance over HTTP with acme's token: %d %s", code, body)
	}
	if code, body := get("dash", ""); code != http.StatusBadRequest {
		t.Errorf("no tenant over HTTP: %d %s, want 400", code, body)
	}
	if code, _ := get("dash", "/../usage"); code == http.StatusOK {
		t.Error("the ledger read over HTTP with a balance token")
	}
}
