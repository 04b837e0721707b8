package agent

import (
	"testing"
	"time"
)

// TestClockObserve: the offset to the coordinators' clock leaves out the
// time the coordinator held the report, so a leader that answers at its
// next allocation round does not move the agent's window boundaries.
//
// The wants follow from the exchange the test builds: the report leaves
// at sent, arrives at received = sent + there + ahead (the coordinator's
// clock), is answered at answered = received + held and gets back at
// got = sent + there + held + back. So
//
//	((received − sent) + (answered − got)) ÷ 2 = ahead + (there − back) ÷ 2
//
// whatever held is: exactly ahead when the delays are even, off by half
// their difference otherwise; and the midpoint, answered − (sent + got) ÷ 2
// = ahead + (there + held − back) ÷ 2, is off by half the hold too.
func TestClockObserve(t *testing.T) {
	const (
		ms   = int64(time.Millisecond)
		sent = 1_000_000 * ms // the agent's clock when it sent
	)
	for _, tc := range []struct {
		name                  string
		ahead                 int64 // the coordinator's clock, less the agent's
		there, held, back     int64 // the network's delays and the coordinator's hold
		noReceived, wantNoObs bool
		swapped               bool // received after answered: nonsense, read as absent
		want                  int64
	}{
		{name: "same clock, answered at once", there: 2 * ms, back: 2 * ms, want: 0}, // ahead 0, even delays
		// The answer waited 240 ms for a round: the midpoint would put the
		// coordinator 120 ms ahead.
		{name: "same clock, answer held for a round", there: 2 * ms, held: 240 * ms, back: 2 * ms, want: 0},                     // ahead 0, even delays
		{name: "coordinator 5 s ahead, held", ahead: 5000 * ms, there: 3 * ms, held: 180 * ms, back: 3 * ms, want: 5000 * ms},   // = ahead: even delays
		{name: "coordinator 2 s behind, held", ahead: -2000 * ms, there: 1 * ms, held: 90 * ms, back: 1 * ms, want: -2000 * ms}, // = ahead: even delays
		// Uneven delays: off by half their difference, as in NTP.
		{name: "uneven delays", there: 10 * ms, held: 50 * ms, back: 2 * ms, want: 4 * ms}, // 0 + (10 − 2) ÷ 2
		// A coordinator that predates received_unix_nano: the midpoint,
		// off by half the hold.
		{name: "no received time", there: 2 * ms, held: 100 * ms, back: 2 * ms, noReceived: true, want: 50 * ms},     // 0 + (2 + 100 − 2) ÷ 2
		{name: "received after answered", there: 2 * ms, held: 100 * ms, back: 2 * ms, swapped: true, want: 50 * ms}, // the midpoint, as above
		{name: "no answer time", wantNoObs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{}
			c.offset.Store(123) // what an earlier exchange showed
			received := sent + tc.there + tc.ahead
			answered := received + tc.held
			got := sent + tc.there + tc.held + tc.back
			switch {
			case tc.wantNoObs:
				answered = 0
			case tc.noReceived:
				received = 0
			case tc.swapped:
				received = answered + 1
			}
			c.observe(sent, got, received, answered)
			want := tc.want
			if tc.wantNoObs {
				want = 123
			}
			if off := c.offset.Load(); off != want {
				t.Errorf("offset %v, want %v", time.Duration(off), time.Duration(want))
			}
		})
	}
}
