package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/ledgerpb"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestOverageOnCluster: a real agent and a real three-member cluster
// enforce a daily quota of 20 with overage up to 1.5 times it. A tenant
// is admitted past its limit to the cap of 30 and refused past it; one
// whose override raises its limit to 40 is admitted to 60 (the
// coordinators lease the cap of the override, the agent checks it). A
// follower's balance shows each one's limit, what it used, and its
// overage; the ledger's lines hold the same overage, and the limit and
// cycle they were counted against; the notice at the cap is recorded.
func TestOverageOnCluster(t *testing.T) {
	nodes := cluster(t, 3, func(c *Config) { c.BillingWindow = time.Second })
	l := waitLeader(t, nodes)
	var f *Coordinator
	for _, c := range nodes {
		if c != l {
			f = c
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc := dial(t, f.GRPCAddr())
	// A loaded machine can hold an election between two writes, and a
	// member that knows no leader refuses a write, applying nothing, with
	// "retry shortly": the test retries as a client would.
	write := func(what string, call func() error) error {
		t.Helper()
		var err error
		testwait.For(t, 20*time.Second, what+" through the follower", func() bool {
			err = call()
			return status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "no leader elected yet")
		})
		return err
	}
	quota := rules.Rule{Name: "plan-quota", Scope: rules.Tenant, Algorithm: algo.FixedWindow, Limit: 20, Period: 24 * time.Hour,
		Intent: lease.Quota, Overage: &rules.Overage{UpTo: 1.5}, Notices: []float64{1, 1.5}}
	rc := allotpb.NewRulesServiceClient(cc)
	if err := write("PutRules", func() error {
		_, err := rc.PutRules(ctx, &allotpb.PutRulesRequest{ReplaceAll: true, Rules: []*allotpb.Rule{rulespb.ToProto(&quota)}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// A cap below the limit, or notices above the cap, are refused and
	// change nothing.
	for _, bad := range []func(*allotpb.Rule){
		func(r *allotpb.Rule) { r.Overage.UpTo = 0.5 },
		func(r *allotpb.Rule) { r.Notices = []float64{1, 2} },
	} {
		r := rulespb.ToProto(&quota)
		bad(r)
		err := write("a bad PutRules", func() error {
			_, err := rc.PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{r}})
			return err
		})
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !containsField(st, "rules[plan-quota].overage.up_to") && !containsField(st, "rules[plan-quota].notices[1]") {
			t.Errorf("a bad overage: %v %q %v; want INVALID_ARGUMENT naming the field", st.Code(), st.Message(), st.Details())
		}
	}
	var set *allotpb.RuleSet
	testwait.For(t, 10*time.Second, "the follower to hold the rule", func() bool {
		resp, err := rc.ListRules(ctx, &allotpb.ListRulesRequest{})
		set = resp
		return err == nil && len(resp.GetRules()) > 0
	})
	if len(set.GetRules()) != 1 || set.GetRules()[0].GetOverage().GetUpTo() != 1.5 || len(set.GetRules()[0].GetNotices()) != 2 {
		t.Fatalf("after refused changes: %v; want the rule as it was put", set)
	}
	if err := write("PutOverrides", func() error {
		_, err := allotpb.NewOverridesServiceClient(cc).PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{
			{Rule: "plan-quota", Tenant: "raised", Limit: 40},
		}})
		return err
	}); err != nil {
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
	testwait.For(t, 10*time.Second, "the agent to hold the rule and the override", func() bool {
		return a.Check(agent.Request{Tenant: "raised", Peek: true}).Limit == 60
	})
	began := time.Now()

	// Past the limit each tenant is admitted, to its cap.
	for _, tc := range []struct {
		tenant string
		cap    int
	}{{"acme", 30}, {"raised", 60}} {
		admitted := 0
		for i := range 2 * tc.cap {
			d := a.Check(agent.Request{Tenant: tc.tenant})
			if d.Allowed {
				admitted++
			} else if i < tc.cap {
				t.Fatalf("%s: check %d refused by %s, below the cap of %d", tc.tenant, i+1, d.Rule, tc.cap)
			}
		}
		if admitted != tc.cap {
			t.Errorf("%s: %d admitted, want the cap of %d", tc.tenant, admitted, tc.cap)
		}
	}

	// The balance, on a follower.
	want := map[string]struct{ limit, used, overage uint64 }{"acme": {20, 30, 10}, "raised": {40, 60, 20}}
	bal := allotpb.NewBalanceServiceClient(cc)
	for tenant, w := range want {
		var got *allotpb.RuleBalance
		testwait.For(t, 20*time.Second, "the follower to count "+tenant+"'s usage", func() bool {
			resp, err := bal.GetBalance(ctx, &allotpb.BalanceRequest{Tenant: tenant})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.GetRules()) != 1 {
				return false
			}
			got = resp.GetRules()[0]
			return got.GetUsed() == w.used
		})
		if start := got.GetCycleStart().AsTime(); start.After(began) {
			t.Skipf("the day renewed while the test ran (at %s): its count started again", start)
		}
		if uint64(got.GetLimit()) != w.limit || got.GetOverage() != w.overage || got.GetRemaining() != 0 {
			t.Errorf("%s's balance: limit %d, used %d, overage %d, remaining %d; want %d, %d, %d and 0",
				tenant, got.GetLimit(), got.GetUsed(), got.GetOverage(), got.GetRemaining(), w.limit, w.used, w.overage)
		}
	}

	// The ledger, as billing reads it: the overage in the lines, with the
	// limit and cycle they were counted against.
	day := began.UTC().Truncate(24 * time.Hour)
	resp, err := allotpb.NewUsageServiceClient(cc).QueryUsage(ctx, &allotpb.UsageQuery{From: timestamppb.New(day), To: timestamppb.New(day.Add(24 * time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	type sums struct{ admitted, overage uint64 }
	got := map[string]sums{}
	for _, r := range resp.GetRecords() {
		line := ledgerpb.FromProto(r)
		if line.Overage > line.Admitted {
			t.Errorf("%v: overage past admitted", line)
		}
		if start, ok := line.Cycle(); !ok || !start.Equal(day) || uint64(line.Limit) != want[line.Tenant].limit {
			t.Errorf("%v: want the day's cycle and the limit of %d", line, want[line.Tenant].limit)
		}
		s := got[line.Tenant]
		s.admitted, s.overage = s.admitted+line.Admitted, s.overage+line.Overage
		got[line.Tenant] = s
	}
	for tenant, w := range want {
		if g := got[tenant]; g != (sums{w.used, w.overage}) {
			t.Errorf("%s in the ledger: %d admitted, %d overage; want %d and %d", tenant, g.admitted, g.overage, w.used, w.overage)
		}
	}

	// The notices at the limit and at the cap.
	_, notices := pendingNotices(f)
	crossed := map[string][]float64{}
	for _, n := range notices {
		crossed[n.GetTenant()] = append(crossed[n.GetTenant()], n.GetThreshold())
	}
	for tenant := range want {
		if th := crossed[tenant]; len(th) != 2 || th[0] != 1 || th[1] != 1.5 {
			t.Errorf("%s's notices at %v, want at the limit and the cap (1, 1.5)", tenant, th)
		}
	}
}
