package allocator

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	allotpb "github.com/allot-io/allot/proto"
)

// windowNode is an agent enforcing a fixed-window lease as the agent
// does: the lease's limit in its window, its next_limit in every window
// after, until a newer lease arrives.
type windowNode struct {
	name       string
	rate       float64 // demand, per second
	offset     time.Duration
	held, next float64
	leaseEnd   time.Time // when next takes over
	epoch, seq uint64
	spent      float64 // in the current window
	window     time.Time
	admitted   float64 // since the last report
	denied     float64
}

// TestWindowHandoverWithinTolerance: a window quota divided among nodes
// that report at different moments of each window, as real processes do,
// admits no window more than the quota's 5% tolerance over its limit,
// and on average at least 99.5% of it when demand exceeds it: with even
// and skewed demand, with demand moving between nodes, with 3 and 10
// nodes, for fixed and sliding windows. Real processes admitted 104–128%
// of a fixed window quota (issue 11). On the previous allocator this model
// admits 74–96% (a lease computed before a node's report could be less
// than it had spent, leaving its share unused); with only that mended, and
// no division decided ahead of each window, 126%.
func TestWindowHandoverWithinTolerance(t *testing.T) {
	for _, alg := range []algo.Algorithm{algo.FixedWindow, algo.SlidingWindow} {
		for _, tc := range []struct {
			name  string
			rates []float64 // each node's demand, per second; 2× the limit in all
			shift bool      // demand moves from the first node to the last halfway
		}{
			{"even-3", []float64{400, 400, 400}, false},
			{"skewed-3", []float64{840, 240, 120}, false},
			{"shift-3", []float64{840, 240, 120}, true},
			{"even-10", []float64{120, 120, 120, 120, 120, 120, 120, 120, 120, 120}, false},
			{"skewed-10", []float64{480, 240, 120, 120, 60, 60, 30, 30, 30, 30}, false},
		} {
			t.Run(alg.String()+"/"+tc.name, func(t *testing.T) {
				worst, avg := runWindows(t, alg, tc.rates, tc.shift)
				t.Logf("worst window %.1f%%, average %.2f%% of the limit", 100*worst, 100*avg)
				if worst > 1.05+1e-3 {
					t.Errorf("a window admitted %.1f%% of the limit; the quota's tolerance is 5%%", 100*worst)
				}
				if avg < 0.995 {
					t.Errorf("windows admitted %.2f%% of the limit on average with demand at 2×; want at least 99.5%%", 100*avg)
				}
			})
		}
	}
}

// runWindows runs nodes at rates against a 600/s window quota for 60 s of
// virtual time and returns the worst window and the average, as fractions
// of the limit, after 5 s of convergence from the even split. The average
// leaves out the window in which demand moved, and the next: a division
// decided ahead of a window cannot follow demand that moves inside it
// until the node that lost it reports (that window admits about 61%; the
// next, at most the tolerance).
func runWindows(t *testing.T, alg algo.Algorithm, rates []float64, shift bool) (worst, avg float64) {
	const limit = 600.0
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	e := quotaEngine(t, alg, int64(limit), start)
	rng := rand.New(rand.NewPCG(1, 2))
	nodes := make([]*windowNode, len(rates))
	for i, rate := range rates {
		// Each node reports once a second at its own moment of the window.
		nodes[i] = &windowNode{name: string(rune('a' + i)), rate: rate, offset: time.Duration(70+i*97%1000) * time.Millisecond}
		nodes[i].held, nodes[i].next = limit/float64(len(rates)), limit/float64(len(rates))
		nodes[i].window = start
	}
	const step = 10 * time.Millisecond
	perWindow := map[time.Time]float64{}
	for now := start; now.Before(start.Add(60 * time.Second)); now = now.Add(step) {
		if shift && now.Equal(start.Add(30*time.Second)) {
			first, last := nodes[0], nodes[len(nodes)-1]
			first.rate, last.rate = last.rate, first.rate
		}
		w := now.Truncate(time.Second)
		for _, n := range nodes {
			if n.window != w {
				n.window, n.spent = w, 0
			}
			if !now.Before(n.leaseEnd) {
				n.held = n.next
			}
			// Demand wanders ±25% around the node's rate.
			want := n.rate * step.Seconds() * (0.75 + 0.5*rng.Float64())
			got := max(0, min(want, n.held-n.spent))
			n.spent += got
			n.admitted += got
			n.denied += want - got
			perWindow[w] += got
			if now.Sub(w) == n.offset.Truncate(step) {
				n.report(t, e, now, w)
			}
		}
		if now.Sub(w)%(250*time.Millisecond) == 0 {
			e.Round(now)
		}
	}
	sum, windows := 0.0, 0
	for w, got := range perWindow {
		if w.Before(start.Add(5 * time.Second)) {
			continue
		}
		worst = max(worst, got/limit)
		if shift && !w.Before(start.Add(30*time.Second)) && w.Before(start.Add(32*time.Second)) {
			continue // the window demand moved in, and the one after, are not steady state
		}
		sum += got / limit
		windows++
	}
	return worst, sum / float64(windows)
}

func (n *windowNode) report(t *testing.T, e *Engine, now, window time.Time) {
	t.Helper()
	resp, err := e.Report(now, &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: n.name, Incarnation: 1, Region: "eu",
		SentUnixNano: now.UnixNano(), IntervalNano: int64(time.Second),
		Demand: []*allotpb.KeyDemand{{Rule: "quota", Key: "acme", Tenant: "acme", Admitted: n.admitted, Denied: n.denied,
			Held: n.held, NextHeld: n.next, HeldEpoch: n.epoch, HeldSeq: n.seq, Committed: n.spent, WindowUnixNano: window.UnixNano()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.admitted, n.denied = 0, 0
	for _, l := range resp.GetLeases() {
		n.held, n.next, n.epoch, n.seq = l.GetLimit(), l.GetNextLimit(), l.GetEpoch(), l.GetSeq()
		if n.next == 0 {
			n.next = n.held // a coordinator without next_limit: the limit holds for every window
		}
		n.leaseEnd = time.Unix(0, l.GetWindowUnixNano()).Add(time.Second)
		if !now.Before(n.leaseEnd) {
			n.held = n.next
		}
	}
}
