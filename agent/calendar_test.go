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
)

// TestMonthlyQuotaRenewsOnTheAnchorDay: a quota of 600 a month from the
// 31st, divided among three gateways that offer far more, admits its
// month's 600 and no more until the cycle renews, which in February is on
// the 28th at midnight, not 720 hours after an epoch-aligned start; then
// it admits the new month's 600. The coordinators divide the window the
// agents report, so the fleet agrees on the calendar's boundary.
func TestMonthlyQuotaRenewsOnTheAnchorDay(t *testing.T) {
	r := rule("plan", rules.Tenant, algo.FixedWindow, 600, algo.Month.Nominal(), lease.Quota)
	r.Cycle = &rules.Cycle{Unit: algo.Month, Anchor: rules.Anchor{AnchorDay: 31}}
	renews := time.Date(2027, 2, 28, 0, 0, 0, 0, time.UTC)
	f := newEngineFleetAt(t, r, 3, 1, renews.Add(-20*time.Second))
	f.run(40 * time.Second) // 300 checks a second offered
	before, after := 0, 0
	for s, n := range f.admitted {
		if s < renews.Unix() {
			before += n
		} else {
			after += n
		}
	}
	t.Logf("admitted: %d before the renewal, %d after", before, after)
	// What the leases guarantee: Σ max(held, granted) ≤ limit × (1 +
	// tolerance), 600 × 1.05 = 630 for a quota, while leases move (each
	// node counting its lease in whole units, max(round(lease), 1), could
	// add under a unit more a gateway; this run on a manual clock is
	// deterministic and admits exactly 600). At least 600: with ten times
	// the quota offered, a cycle refused before its limit is a wrongful
	// refusal.
	const most = 630
	if before < 600 || before > most {
		t.Errorf("January 31st's cycle admitted %d of 600 with 6,000 offered; want 600 to %d", before, most)
	}
	if after < 600 || after > most {
		t.Errorf("February 28th's cycle admitted %d of 600 in its first 20 s with 6,000 offered; want 600 to %d", after, most)
	}
	if d := f.gws[0].Check(Request{Tenant: "acme"}); d.Allowed || !f.clk.Now().Add(d.RetryAfter).Equal(time.Date(2027, 3, 31, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("after the cycle's 600: %+v, want refused until March 31st", d)
	}
}

// TestTenantsRenewOnTheirOwnDay: a monthly quota whose tenants renew on
// their own day: acme anchored on the 17th in New York through the
// overrides API, the pro plan on the 5th in the rule file, globex on the
// rule's 1st in UTC. Each, its quota spent, is told to come back at its
// own cycle's renewal, on a real cluster.
func TestTenantsRenewOnTheirOwnDay(t *testing.T) {
	cs := coordinators(t, 3)
	quota := rule("monthly", rules.Tenant, algo.FixedWindow, 3, algo.Month.Nominal(), lease.Quota)
	quota.Cycle = &rules.Cycle{Unit: algo.Month}
	quota.Plans = map[string]rules.Plan{"pro": {Cycle: rules.Anchor{AnchorDay: 5}}}
	putRules(t, cs[0].GRPCAddr(), quota)
	a := newAgent(t, "gw-1", addrs(cs), nil)
	oc := overridesClient(t, cs[0].GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := oc.PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{
		{Rule: "monthly", Tenant: "acme", Cycle: &allotpb.Anchor{AnchorDay: 17, TimeZone: "America/New_York"}},
	}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the agent to hold acme's anchor", func() bool {
		for _, rs := range a.rules.Load().rules {
			if rs.rule.Name == "monthly" {
				return rs.overrides.get("acme") != nil
			}
		}
		return false
	})
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tenant, plan string
		cal          algo.Calendar
	}{
		{"acme", "", algo.Calendar{Unit: algo.Month, Anchor: 17, Location: ny}},
		{"initech", "pro", algo.Calendar{Unit: algo.Month, Anchor: 5}},
		{"globex", "", algo.Calendar{Unit: algo.Month, Anchor: 1}},
	} {
		var d Decision
		for range 10 {
			if d = a.Check(Request{Tenant: tc.tenant, Plan: tc.plan}); !d.Allowed {
				break
			}
		}
		if d.Allowed {
			t.Fatalf("%s: 10 checks of a quota of 3 all admitted", tc.tenant)
		}
		now := time.Now()
		want := tc.cal.Next(tc.cal.Start(now))
		if got := now.Add(d.RetryAfter); got.Sub(want).Abs() > 2*time.Second {
			t.Errorf("%s: refused until %v, want its cycle's renewal at %v", tc.tenant, got, want)
		}
	}
}

// TestPlanChangeMidCycle: a tenant's limit changed in the middle of its
// month applies to what it has already used this month, within a report
// interval, on every gateway: upgraded when its quota is spent, its next
// calls pass; downgraded below what it used, it is refused until the
// cycle renews. Two gateways share the tenant's traffic. (A gateway that
// had not served the tenant this month still spends its unleased share
// before its first lease arrives: 20 of a spent quota on a third gateway
// here; issue 44's open accuracy defect.)
func TestPlanChangeMidCycle(t *testing.T) {
	cs := coordinators(t, 3)
	quota := rule("monthly", rules.Tenant, algo.FixedWindow, 100, algo.Month.Nominal(), lease.Quota)
	quota.Cycle = &rules.Cycle{Unit: algo.Month}
	putRules(t, cs[0].GRPCAddr(), quota)
	gws := []*Agent{newAgent(t, "gw-1", addrs(cs), nil), newAgent(t, "gw-2", addrs(cs), nil)}
	oc := overridesClient(t, cs[0].GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Each gateway knows the fleet is two before it serves: one that has
	// not yet heard so decides its first checks on the whole limit as its
	// unleased share (issue 44's open defect, the one noted above), which
	// is not what this test is about.
	testwait.For(t, 10*time.Second, "both gateways to count the fleet", func() bool {
		return gws[0].nodes.Load() == 2 && gws[1].nodes.Load() == 2
	})
	admitted := 0
	check := func() bool {
		d := gws[admitted%2].Check(Request{Tenant: "acme"})
		if d.Allowed {
			admitted++
		}
		return d.Allowed
	}
	// Spend the month's 100, as the two gateways' leases allow.
	testwait.For(t, 20*time.Second, "acme's 100 spent", func() bool {
		for check() {
		}
		return admitted >= 100
	})
	// At most the limit and the quota's tolerance while leases change
	// hands, Σ max(held, granted) ≤ limit × (1 + tolerance), and less than
	// one unit more a gateway: each counts its lease in whole units,
	// max(round(lease), 1) (nodeConfig).
	most := func(limit int64) int { return int(float64(limit)*(1+quota.Tol())) + len(gws) }
	if admitted > most(100) {
		t.Fatalf("acme admitted %d of a monthly 100", admitted)
	}
	spent := admitted
	set := func(limit int64) {
		t.Helper()
		if _, err := oc.PutOverrides(ctx, &allotpb.PutOverridesRequest{Overrides: []*allotpb.Override{{Rule: "monthly", Tenant: "acme", Limit: limit}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Upgraded to 150: the next calls pass, up to the 50 more.
	set(150)
	testwait.For(t, 10*time.Second, "the upgrade to admit acme again", func() bool { return check() })
	testwait.For(t, 10*time.Second, "acme's 150 spent", func() bool {
		for check() {
		}
		return admitted >= 150
	})
	if admitted > most(150) {
		t.Errorf("upgraded to 150 with %d spent, acme admitted %d in all", spent, admitted)
	}
	// Downgraded to 60, below the 150 it used: refused, on both gateways,
	// whatever it asks, until the month renews.
	set(60)
	before := admitted
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		check()
		time.Sleep(5 * time.Millisecond)
	}
	// A lease of "nothing more" lets its holder admit at most one unit
	// more in the window (a window's counts are whole; coordinator/
	// allocator's minLease): one per gateway.
	if n := admitted - before; n > len(gws) {
		t.Errorf("downgraded to 60 with %d used, acme admitted %d more over %d gateways", before, n, len(gws))
	}
}
