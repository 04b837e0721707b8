package agent

import (
	"context"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func resetsClient(t *testing.T, addr string) allotpb.ResetsServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return allotpb.NewResetsServiceClient(cc)
}

// spend checks req on every agent in turn until none has admitted one
// for quiet, and returns how many were admitted.
func spend(agents []*Agent, req Request, quiet time.Duration) int {
	admitted, last := 0, time.Now()
	for time.Since(last) < quiet {
		for _, a := range agents {
			if a.Check(req).Allowed {
				admitted++
				last = time.Now()
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return admitted
}

// TestResetRestoresQuota: a tenant that spent its quota (10 an hour,
// coordinated over two agents) is reset through a follower, which
// forwards to the leader; within a few report intervals the fleet admits
// the tenant's full quota again, and no more; the ledger keeps what was
// admitted before the reset and counts what was admitted after.
func TestResetRestoresQuota(t *testing.T) {
	cs := coordinators(t, 3)
	putRules(t, cs[0].GRPCAddr(), rule("plan-quota", rules.Tenant, algo.FixedWindow, 10, time.Hour, lease.Quota))
	agents := []*Agent{newAgent(t, "gw-1", addrs(cs), nil), newAgent(t, "gw-2", addrs(cs), nil)}
	var follower string
	for _, c := range cs {
		if st := c.Status(); st.GetLeaderGrpcAddress() != c.GRPCAddr() {
			follower = c.GRPCAddr()
		}
	}
	rc := resetsClient(t, follower)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Each agent's unleased share is a half once both count two nodes
	// and have joined the fleet.
	testwait.For(t, 10*time.Second, "both agents to join the fleet", func() bool {
		for _, a := range agents {
			if a.nodes.Load() != 2 || a.joining.Load() {
				return false
			}
		}
		return true
	})
	acme := Request{Tenant: "acme"}
	before := spend(agents, acme, 2*time.Second)
	t.Logf("before the reset the fleet admitted %d", before)
	if before < 8 || before > 10 {
		t.Fatalf("before the reset the fleet admitted %d of a quota of 10", before)
	}
	for _, a := range agents {
		if a.Check(acme).Allowed {
			t.Fatal("a spent tenant was admitted before the reset")
		}
	}

	start := time.Now()
	var resp *allotpb.ResetKeysResponse
	var err error
	testwait.For(t, 10*time.Second, "the reset to be recorded", func() bool {
		// Unavailable while an election runs (a loaded machine).
		resp, err = rc.ResetKeys(ctx, &allotpb.ResetKeysRequest{Target: &allotpb.Reset{Rule: "plan-quota", Tenant: "acme", Reason: "support case 42"}})
		if status.Code(err) == codes.Unavailable {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true
	})
	if r := resp.GetRecorded(); r.GetVersion() != 1 || r.GetKey() != "acme" || r.GetReason() != "support case 42" || r.GetAtUnixNano() == 0 {
		t.Fatalf("recorded %v", r)
	}
	// Each agent admits the tenant again once it took the reset: the
	// first check it admits is counted.
	after := 0
	for _, a := range agents {
		testwait.For(t, 10*time.Second, "the reset to reach "+a.cfg.NodeID, func() bool {
			if a.Check(acme).Allowed {
				after++
				return true
			}
			return false
		})
	}
	t.Logf("the reset reached both agents %v after the call returned (report interval %v)", time.Since(start).Round(time.Millisecond), testInterval)
	after += spend(agents, acme, 2*time.Second)
	t.Logf("after the reset the fleet admitted %d", after)
	// The quota's 5% of hand-over room is half a unit here: window
	// leases are divided in whole units, so the fleet admits at most the
	// quota, before the reset and after it. (Grants of 5.5 each, enforced
	// as 6, let it admit 12.)
	if after > 10 || after < 8 {
		t.Errorf("after the reset the fleet admitted %d of a quota of 10 (%d before it), want 8–10", after, before)
	}

	list, err := rc.ListResets(ctx, &allotpb.ListResetsRequest{Rule: "plan-quota"})
	if err != nil || len(list.GetResets()) != 1 || list.GetVersion() != 1 {
		t.Fatalf("list: %v, %v", list, err)
	}

	for _, a := range agents {
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cc, _ := grpc.NewClient(cs[0].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer cc.Close()
	var total uint64
	testwait.For(t, 10*time.Second, "the ledger to hold every admission", func() bool {
		q, err := allotpb.NewUsageServiceClient(cc).QueryUsage(ctx, &allotpb.UsageQuery{Tenant: "acme", Rule: "plan-quota", From: timestamppb.New(time.Now().Add(-2 * time.Hour))})
		if err != nil {
			return false
		}
		total = 0
		for _, r := range q.GetRecords() {
			total += r.GetAdmitted()
		}
		return total == uint64(before+after)
	})
	if total != uint64(before+after) {
		t.Errorf("the ledger holds %d admitted, the test saw %d before the reset and %d after", total, before, after)
	}
}

// TestResetTenantAllKeys: every key of a tenant under a rule keyed by
// tenant and user starts afresh, hot or not, overridden or not; another
// tenant's keys keep what they spent.
func TestResetTenantAllKeys(t *testing.T) {
	cs := coordinators(t, 1)
	putRules(t, cs[0].GRPCAddr(), rule("per-user", rules.User, algo.FixedWindow, 3, time.Hour, lease.Quota))
	a := newAgent(t, "gw-1", addrs(cs), nil)
	rc := resetsClient(t, cs[0].GRPCAddr())
	oc := overridesClient(t, cs[0].GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := oc.PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{{Rule: "per-user", Tenant: "initech", Limit: 2}}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the override", func() bool { return a.Check(Request{Tenant: "initech", User: "probe"}).Limit == 2 })

	reqs := []Request{{Tenant: "acme", User: "u1"}, {Tenant: "acme", User: "u2"}, {Tenant: "initech", User: "u1"}, {Tenant: "initech", User: "probe"}, {Tenant: "globex", User: "u1"}}
	for _, req := range reqs {
		spend([]*Agent{a}, req, 500*time.Millisecond)
	}
	for _, tenant := range []string{"acme", "initech"} {
		if _, err := rc.ResetKeys(ctx, &allotpb.ResetKeysRequest{Target: &allotpb.Reset{Rule: "per-user", Tenant: tenant, AllKeys: true}}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, 10*time.Second, "the resets to reach the agent", func() bool { return a.rep.resets.taken.Load() == 2 })
	for _, req := range reqs[:4] {
		want := 3
		if req.Tenant == "initech" {
			want = 2
		}
		if n := spend([]*Agent{a}, req, 300*time.Millisecond); n != want {
			t.Errorf("%s/%s admitted %d after its tenant's reset, want %d", req.Tenant, req.User, n, want)
		}
	}
	if a.Check(reqs[4]).Allowed {
		t.Error("globex, not reset, was admitted")
	}
	// The reset tenant's later keys, new ones included, count as usual.
	if n := spend([]*Agent{a}, Request{Tenant: "acme", User: "u3"}, 300*time.Millisecond); n != 3 {
		t.Errorf("a new key of a reset tenant admitted %d, want 3", n)
	}
}

// TestResetRefusesBadInput: each bad call is refused with the field it
// names, and no reset is recorded.
func TestResetRefusesBadInput(t *testing.T) {
	cs := coordinators(t, 1)
	desc := rule("envoy", rules.Descriptor, algo.GCRA, 10, time.Second, lease.Capacity)
	desc.Match = rules.Match{Domain: "edge", Descriptors: []rules.DescriptorEntry{{Key: "path"}}}
	putRules(t, cs[0].GRPCAddr(),
		rule("plan-quota", rules.Tenant, algo.FixedWindow, 10, time.Hour, lease.Quota),
		rule("per-user", rules.User, algo.FixedWindow, 10, time.Hour, lease.Quota), desc)
	a := newAgent(t, "gw-1", addrs(cs), nil)
	a.Check(Request{Tenant: "acme", User: "u1"})
	rc := resetsClient(t, cs[0].GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// acme's usage reaches the ledger: a reset of its keys is found.
	testwait.For(t, 10*time.Second, "acme's usage in the ledger", func() bool {
		_, err := rc.ResetKeys(ctx, &allotpb.ResetKeysRequest{Target: &allotpb.Reset{Rule: "plan-quota", Tenant: "acme"}})
		return err == nil
	})
	for _, tc := range []struct {
		name   string
		target *allotpb.Reset
		code   codes.Code
		field  string
	}{
		{"none", nil, codes.InvalidArgument, "target"},
		{"unknown rule", &allotpb.Reset{Rule: "nope", Tenant: "acme"}, codes.InvalidArgument, "target.rule"},
		{"missing user", &allotpb.Reset{Rule: "per-user", Tenant: "acme"}, codes.InvalidArgument, "target.user"},
		{"not in the key", &allotpb.Reset{Rule: "plan-quota", Tenant: "acme", Route: "/x"}, codes.InvalidArgument, "target.route"},
		{"descriptor", &allotpb.Reset{Rule: "envoy"}, codes.InvalidArgument, "target.rule"},
		{"never seen", &allotpb.Reset{Rule: "plan-quota", Tenant: "ghost"}, codes.NotFound, ""},
		{"never seen, all keys", &allotpb.Reset{Rule: "per-user", Tenant: "ghost", AllKeys: true}, codes.NotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rc.ResetKeys(ctx, &allotpb.ResetKeysRequest{Target: tc.target})
			st, _ := status.FromError(err)
			if st.Code() != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
			if tc.field != "" && !hasViolation(st, tc.field) {
				t.Fatalf("%v names no field %s", err, tc.field)
			}
			list, err := rc.ListResets(ctx, &allotpb.ListResetsRequest{})
			if err != nil || list.GetVersion() != 1 {
				t.Fatalf("after a refused call: %v, %v; want the one reset made", list, err)
			}
		})
	}
	if _, err := rc.ListResets(ctx, &allotpb.ListResetsRequest{Limit: 20_000}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a page of 20000: %v", err)
	}
}
