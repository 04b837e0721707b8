package agent

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/testwait"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ledgerTransport plays a coordinator's ledger: it acknowledges usage
// batches exactly once by sequence number and sums what it applied, and
// refuses, as a stricter coordinator would, every count whose tenant is
// "poison", naming each.
type ledgerTransport struct {
	mu       sync.Mutex
	acked    uint64
	admitted map[string]uint64 // by tenant
	denied   map[string]uint64
	refusals int
	hang     bool
}

func newLedgerTransport() *ledgerTransport {
	return &ledgerTransport{admitted: map[string]uint64{}, denied: map[string]uint64{}}
}

func (l *ledgerTransport) Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	l.mu.Lock()
	if l.hang {
		l.mu.Unlock()
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	defer l.mu.Unlock()
	b := req.GetUsage()
	var bad []*errdetails.BadRequest_FieldViolation
	for i, c := range b.GetCounts() {
		if c.GetTenant() == "poison" {
			bad = append(bad, &errdetails.BadRequest_FieldViolation{Field: fmt.Sprintf("usage.counts[%d].tenant", i), Description: "not a tenant this coordinator bills"})
		}
	}
	if len(bad) > 0 {
		l.refusals++
		st, _ := status.New(codes.InvalidArgument, "usage refused").WithDetails(&errdetails.BadRequest{FieldViolations: bad})
		return nil, st.Err()
	}
	if b != nil && b.GetSeq() > l.acked {
		for _, c := range b.GetCounts() {
			l.admitted[c.GetTenant()] += c.GetAdmitted()
			l.denied[c.GetTenant()] += c.GetDenied()
		}
		l.acked = b.GetSeq()
	}
	return &allotpb.ReportResponse{AckedSeq: l.acked, CoordinatorUnixNano: time.Now().UnixNano(), Nodes: 1}, nil
}

func (l *ledgerTransport) counts(tenant string) (admitted, denied uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.admitted[tenant], l.denied[tenant]
}

func transportAgent(t *testing.T, tr Transport, reg prometheus.Registerer, rs ...rules.Rule) *Agent {
	t.Helper()
	a, err := New(Config{Transport: tr, NodeID: "gw-1", Rules: rs, ReportInterval: 20 * time.Millisecond, Registerer: reg, CloseTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

// TestRefusedUsageQuarantined: a coordinator refusing some entries of a
// batch (issue 10, failure 1) must not wedge reporting. The refused
// entries are quarantined, counted and never sent again; the rest of the
// batch, and every later batch, reaches the ledger.
func TestRefusedUsageQuarantined(t *testing.T) {
	tr := newLedgerTransport()
	reg := prometheus.NewRegistry()
	a := transportAgent(t, tr, reg, rule("quota", rules.Tenant, algo.TokenBucket, 1000, time.Second, lease.Quota))
	// While it joins, an agent reports a new key's first check at once
	// (an urgent report), which would split the three into two batches.
	testwait.For(t, 10*time.Second, "the agent to have joined", func() bool { return !a.joining.Load() })
	for i := 0; i < 3; i++ {
		a.Check(Request{Tenant: "poison"})
	}
	for i := 0; i < 5; i++ {
		a.Check(Request{Tenant: "acme"})
	}
	testwait.For(t, 10*time.Second, "acme's 5 in the ledger", func() bool { adm, _ := tr.counts("acme"); return adm == 5 })
	a.Check(Request{Tenant: "acme"})
	a.Check(Request{Tenant: "acme"})
	testwait.For(t, 10*time.Second, "acme's next 2 in the ledger", func() bool { adm, _ := tr.counts("acme"); return adm == 7 })
	tr.mu.Lock()
	refusals := tr.refusals
	tr.mu.Unlock()
	if refusals != 1 {
		t.Errorf("the coordinator refused %d reports; the poisoned entry must be sent once, then quarantined", refusals)
	}
	if got := counterValue(a.metrics.quarantinedUnits.WithLabelValues("admitted")); got != 3 {
		t.Errorf("quarantined admitted units = %v, want 3", got)
	}
	if got := counterValue(a.metrics.quarantined.WithLabelValues("usage", "tenant")); got != 1 {
		t.Errorf("quarantined usage entries = %v, want 1", got)
	}
}

// TestCostBounds: a cost past MaxCost is refused without being counted
// (issue 10, failure 3: three refusals of 2^62 wrapped the counter and
// billed 0), the sidecar answers it 400, and MaxCost itself is billed
// exactly.
func TestCostBounds(t *testing.T) {
	tr := newLedgerTransport()
	a := transportAgent(t, tr, nil, rule("quota", rules.Tenant, algo.TokenBucket, 100, time.Second, lease.Quota))
	for i := 0; i < 3; i++ {
		d := a.Check(Request{Tenant: "huge", Cost: 1 << 62})
		if d.Allowed || d.RetryAfter >= 0 || d.Rule != "" {
			t.Fatalf("cost 2^62: %+v; want refused as never admissible, by no rule", d)
		}
		if d := a.Check(Request{Tenant: "max", Cost: MaxCost}); d.Allowed || d.Rule != "quota" {
			t.Fatalf("cost MaxCost: %+v; want refused by quota", d)
		}
	}
	if got := a.invalid.Load(); got != 3 {
		t.Errorf("invalid checks = %d, want 3", got)
	}
	testwait.For(t, 10*time.Second, "MaxCost's refusals billed", func() bool { _, den := tr.counts("max"); return den == 3*MaxCost })
	if adm, den := tr.counts("huge"); adm != 0 || den != 0 {
		t.Errorf("cost 2^62 billed admitted %d denied %d; want nothing", adm, den)
	}
}

// TestCloseBounded: with no coordinator answering and a context without a
// deadline, Close gives up after CloseTimeout and says what it lost.
func TestCloseBounded(t *testing.T) {
	tr := newLedgerTransport()
	tr.hang = true
	a, err := New(Config{Transport: tr, NodeID: "gw-1", Rules: []rules.Rule{rule("quota", rules.Tenant, algo.TokenBucket, 100, time.Second, lease.Quota)},
		ReportInterval: 20 * time.Millisecond, CloseTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a.Check(Request{Tenant: "acme"})
	done := make(chan error, 1)
	go func() { done <- a.Close(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "usage not reported") {
			t.Fatalf("Close = %v; want an error saying usage was not reported", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return with no coordinator answering")
	}
}

// TestReportsSplitToLimits: a sidecar tracking more tenants than one
// report may carry splits its usage into batches, and a coordinator that
// allows fewer keys than the agent's default gets smaller reports, all
// applied exactly once.
func TestReportsSplitToLimits(t *testing.T) {
	cs := coordinatorsWith(t, 1, func(c *coordinator.Config) { c.MaxReportKeys = 100 })
	putRules(t, cs[0].GRPCAddr(), rule("quota", rules.Tenant, algo.TokenBucket, 1_000_000, time.Second, lease.Quota))
	a := newAgent(t, "gw-1", addrs(cs), nil)
	const tenants = 1500
	for i := 0; i < tenants; i++ {
		a.Check(Request{Tenant: fmt.Sprintf("t%04d", i)})
	}
	closeAndCompare(t, a, cs[0].GRPCAddr(), "quota", func(tenant string) uint64 { return 1 }, tenants)
}

// TestLongTenantBilled: a tenant name past the coordinators' limit, which
// once made them refuse every report of the sidecar that admitted it
// (issue 10, failure 1), is billed under its bounded name, and the other
// tenants' usage keeps flowing.
func TestLongTenantBilled(t *testing.T) {
	cs := coordinators(t, 1)
	putRules(t, cs[0].GRPCAddr(), rule("quota", rules.Tenant, algo.TokenBucket, 1_000_000, time.Second, lease.Quota))
	a := newAgent(t, "gw-1", addrs(cs), nil)
	long := strings.Repeat("x", 300)
	for i := 0; i < 5; i++ {
		a.Check(Request{Tenant: long})
		a.Check(Request{Tenant: "acme"})
	}
	want := map[string]uint64{allotpb.BoundName(long): 5, "acme": 5}
	closeAndCompare(t, a, cs[0].GRPCAddr(), "quota", func(tenant string) uint64 { return want[tenant] }, len(want))
}

// TestAnyBytesReport: attributes that are not valid UTF-8, or too long to
// keep in a key, once made gRPC refuse to send the report (protobuf
// strings are UTF-8), and the same batch was re-sent forever. Keys now
// hash such values in hex, names are bounded, and the usage of every
// tenant reaches the ledger.
func TestAnyBytesReport(t *testing.T) {
	cs := coordinators(t, 1)
	// A per-user quota of 5 makes each user's key hot (and reported) at
	// once; the tenant quota bills every request.
	user := rule("per-user", rules.User, algo.TokenBucket, 5, time.Hour, lease.Quota)
	user.Key = []rules.Attr{rules.AttrTenant, rules.AttrUser}
	putRules(t, cs[0].GRPCAddr(), user, rule("quota", rules.Tenant, algo.TokenBucket, 1_000_000, time.Second, lease.Quota))
	a := newAgent(t, "gw-1", addrs(cs), nil)
	reqs := []Request{
		{Tenant: "\xff\xfe", User: "\xc3"},
		{Tenant: "acme", User: strings.Repeat("u", 200)},
		{Tenant: "acme", User: strings.Repeat("é", 64)}, // 128 bytes: over a part of a key, under a whole one
		{Tenant: strings.Repeat("\xe9", 300), User: "v"},
	}
	want := map[string]uint64{}
	for _, r := range reqs {
		for i := 0; i < 8; i++ {
			if a.Check(r).Allowed {
				want[allotpb.BoundName(r.Tenant)]++
			}
		}
	}
	answered := reportsOK(a)
	testwait.For(t, 10*time.Second, "two more answered reports", func() bool { return reportsOK(a) >= answered+2 })
	if got := counterValue(a.metrics.quarantined.WithLabelValues("demand", "key")); got != 0 {
		t.Errorf("%v keys quarantined; every key must be sendable", got)
	}
	closeAndCompare(t, a, cs[0].GRPCAddr(), "quota", func(tenant string) uint64 { return want[tenant] }, len(want))
}

// TestRuleForOtherRegionSkipped: a rule whose regions leave out the
// node's is skipped there, and the others are enforced; once, the whole
// set failed to install and the node admitted everything.
func TestRuleForOtherRegionSkipped(t *testing.T) {
	cs := coordinators(t, 1)
	elsewhere := rule("us-only", rules.Tenant, algo.TokenBucket, 100, time.Second, lease.Abuse)
	elsewhere.Regions = map[string]float64{"us-east": 1}
	here := rule("quota", rules.Tenant, algo.FixedWindow, 3, time.Hour, lease.Quota)
	here.Local = true
	putRules(t, cs[0].GRPCAddr(), elsewhere, here)
	a := newAgent(t, "gw-1", addrs(cs), nil)
	for i := 0; i < 3; i++ {
		if d := a.Check(Request{Tenant: "acme"}); !d.Allowed {
			t.Fatalf("check %d: %+v", i, d)
		}
	}
	if d := a.Check(Request{Tenant: "acme"}); d.Allowed || d.Rule != "quota" {
		t.Fatalf("4th check of a quota of 3: %+v; want refused by quota", d)
	}
	st := a.Status()
	if len(st.Rules) != 1 || st.Rules[0] != "quota" || len(st.Problems) != 1 || st.Problems[0].Rule != "us-only" || st.Problems[0].Problem != ProblemOtherRegion {
		t.Fatalf("status %+v; want quota enforced and us-only skipped for its region", st)
	}
}

// coordinatorsWith starts n coordinators on loopback, in temporary dirs,
// with mod (if set) applied to each configuration.
func coordinatorsWith(t *testing.T, n int, mod func(*coordinator.Config)) []*coordinator.Coordinator {
	t.Helper()
	var cs []*coordinator.Coordinator
	for i := 0; i < n; i++ {
		cfg := coordinator.Config{
			NodeID: fmt.Sprintf("c%d", i+1), DataDir: t.TempDir(), Region: "eu-west",
			RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
			ReportInterval: testInterval, LeaseTTL: 5 * testInterval, ApplyWindow: 5 * time.Millisecond,
			HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
			Logger: hclog.NewNullLogger(),
		}
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = []string{cs[0].GRPCAddr()}
		}
		if mod != nil {
			mod(&cfg)
		}
		c, err := coordinator.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopCoordinator(c) })
		cs = append(cs, c)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := c.WaitLeader(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	return cs
}

// closeAndCompare closes the agent, which flushes its usage, and checks
// the ledger holds exactly want(tenant) admitted for each of n tenants
// under the rule.
func closeAndCompare(t *testing.T, a *Agent, addr, ruleName string, want func(string) uint64, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := ledgerAdmitted(ctx, t, addr, "", ruleName)
	if len(got) != n {
		t.Errorf("ledger has %d tenants under %s, want %d", len(got), ruleName, n)
	}
	for tenant, g := range got {
		if w := want(tenant); g != w {
			t.Errorf("ledger %.40s/%s: admitted %d, the agent admitted %d", tenant, ruleName, g, w)
		}
	}
}

// ledgerAdmitted reads the units admitted under a rule, by tenant, from
// the coordinator at addr, presenting token if set.
func ledgerAdmitted(ctx context.Context, t *testing.T, addr, token, ruleName string) map[string]uint64 {
	t.Helper()
	return ledgerQuery(ctx, t, addr, token, &allotpb.UsageQuery{Rule: ruleName})
}

// ledgerQuery sums the units admitted by tenant over every page of q
// (its time bounds set here), from the coordinator at addr.
func ledgerQuery(ctx context.Context, t *testing.T, addr, token string, q *allotpb.UsageQuery) map[string]uint64 {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	got := map[string]uint64{}
	q.From, q.PageSize = timestamppb.New(time.Now().Add(-2*time.Hour)), 1000
	for {
		resp, err := allotpb.NewUsageServiceClient(cc).QueryUsage(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetRecords() {
			got[r.GetTenant()] += r.GetAdmitted()
		}
		if q.PageToken = resp.GetNextPageToken(); q.PageToken == "" {
			return got
		}
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return math.NaN()
	}
	return m.GetCounter().GetValue()
}
