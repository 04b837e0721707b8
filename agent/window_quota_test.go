package agent

import (
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// TestSlidingWindowOneNodeWithinLimit: one gateway holds the whole of a
// sliding-window quota of 600 a minute and is offered 20 checks a second,
// twice that. Nobody shares the limit, so no aligned minute may admit
// more than 600; each admits exactly 600, the estimate's slack making up
// for the unit its rounding keeps back. The node's part once counted the
// slack unit itself: the node spent its lease and one more, the
// coordinators granted what it reported spending, and it spent one more
// again, a unit a report, until the hand-over guard's room: 631 to 660 a
// minute here, 639 and 641 on real processes (issue 44).
func TestSlidingWindowOneNodeWithinLimit(t *testing.T) {
	f := newEngineFleet(t, rule("quota", rules.Tenant, algo.SlidingWindow, 600, time.Minute, lease.Quota), 1, 1)
	f.every = 5 // 20 a second
	f.run(5 * time.Minute)
	perMinute := map[int64]int{}
	for s, n := range f.admitted {
		perMinute[s/60] += n
	}
	first := f.first / 60
	for m := first; m < f.clk.Now().Unix()/60; m++ {
		got := perMinute[m]
		if got > 600 {
			t.Errorf("minute %d admitted %d of 600 on the one node holding the whole limit", m-first, got)
		}
		if m > first && got < 600 {
			t.Errorf("minute %d admitted %d of 600 with twice that offered: under the quota", m-first, got)
		}
	}
}
