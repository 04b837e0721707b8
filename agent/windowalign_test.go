package agent

import (
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// TestWindowsAlignWithTheAlgorithm: a fixed window of a period that does
// not divide the time between year 1 and the Unix epoch (7 minutes, 168
// hours, 720 hours) is counted, reported and leased in the same windows:
// the algorithm's, multiples of the period since the Unix epoch. Three
// gateways offering far more than a 7-minute quota admit the quota in
// every such window.
func TestWindowsAlignWithTheAlgorithm(t *testing.T) {
	const period = 7 * time.Minute
	r := rule("quota", rules.Tenant, algo.FixedWindow, 600, period, lease.Quota)
	first := time.Unix(0, 0).Add(period * time.Duration(time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()/int64(period)))
	f := newEngineFleetAt(t, r, 3, 1, first.Add(-90*time.Second))
	f.run(3*period + 90*time.Second)
	for w := first; w.Add(period).Before(f.clk.Now()); w = w.Add(period) {
		got := 0
		for s := w.Unix(); s < w.Add(period).Unix(); s++ {
			got += f.admitted[s]
		}
		if got < 600 || got > 630 {
			t.Errorf("the window from %v admitted %d of 600 with far more offered", w.UTC(), got)
		}
	}
	if got, want := r.WindowStart(first.Add(time.Minute)), first; !got.Equal(want) {
		t.Errorf("WindowStart = %v, want the algorithm's window from %v", got.UTC(), want.UTC())
	}
}
