package agent

import (
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
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
	r.Cycle = &rules.Cycle{Unit: algo.Month, AnchorDay: 31}
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
	// A quota's window may go over by its tolerance (lease.Quota's 5%)
	// while leases move; the whole-unit window leases keep it to a few.
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
