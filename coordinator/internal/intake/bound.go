package intake

import (
	"sync"
	"sync/atomic"
	"time"
)

// Bound bounds the reports the leader takes at once, in number and in
// entries (key demands and usage counts). A report taken holds a
// goroutine, its decoded request and its folded entries until it is
// answered; a leader taking every report that arrived, however many were
// under way, queued them without bound when it fell behind, each answered
// long after its caller had left, until it ran out of memory (issue 41:
// 6,900 goroutines and 2.8 GB at 100 gateways). Past the bound a report is
// answered at once without being taken: shed.
//
// The number alone does not bound memory: a report's size is the keys its
// gateway saw, and at 10,000 tenants 512 reports in flight held 575 MB of
// decoded requests (make fleet, 50 gateways, a heap profile of the
// leader). The entries bound is on that memory, about 250 bytes a decoded
// entry; a report alone is always taken, whatever its size
// (MaxReportKeys bounds that).
//
// Early reports are shed first, from half of either bound, and while
// allocation rounds overrun their interval: they ask for more sooner,
// which a leader behind on its rounds cannot give anyway. A regular report
// is shed only at the bound itself, and never, below it, a node's first
// report of the term: a new leader learns what the fleet holds from those.
type Bound struct {
	max, maxEntries   int64 // 0: unbounded
	inFlight, entries atomic.Int64
}

// NewBound returns a bound of reports and of their entries in flight; 0
// or less is no bound.
func NewBound(reports, entries int) *Bound {
	return &Bound{max: int64(max(reports, 0)), maxEntries: int64(max(entries, 0))}
}

// Take reports whether a report of entries entries may be taken, and if
// so counts it in flight until Done. urgent says it is an early report,
// known that its node has reported to this leader, behind that the last
// round overran.
func (in *Bound) Take(urgent, known, behind bool, entries int) bool {
	n := in.inFlight.Add(1)
	e := in.entries.Add(int64(entries))
	if in.max == 0 && in.maxEntries == 0 {
		return true
	}
	over := func(n, max int64) bool { return max > 0 && n > max }
	half := func(n, max int64) bool { return max > 0 && n > max/2 }
	// A report alone (n == 1) is taken whatever its entries.
	shed := over(n, in.max) || (n > 1 && over(e, in.maxEntries))
	if known && urgent && (behind || half(n, in.max) || (n > 1 && half(e, in.maxEntries))) {
		shed = true
	}
	if shed {
		in.inFlight.Add(-1)
		in.entries.Add(-int64(entries))
	}
	return !shed
}

// Done ends a report of entries entries that Take took.
func (in *Bound) Done(entries int) {
	in.inFlight.Add(-1)
	in.entries.Add(-int64(entries))
}

// InFlight is the number of reports taken and not done.
func (in *Bound) InFlight() int64 { return in.inFlight.Load() }

// EntriesInFlight is the entries of the reports taken and not done.
func (in *Bound) EntriesInFlight() int64 { return in.entries.Load() }

// NodeGate bounds the node IDs never seen before that may join each
// minute: a token bucket of perMinute, full at the start.
type NodeGate struct {
	perMinute float64 // negative: unbounded

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// NewNodeGate returns a gate letting perMinute new nodes join a minute,
// negative for no bound.
func NewNodeGate(perMinute int, now time.Time) *NodeGate {
	return &NodeGate{perMinute: float64(perMinute), tokens: float64(perMinute), last: now}
}

// Admit takes one new node's place, if there is one.
func (g *NodeGate) Admit(now time.Time) bool {
	if g.perMinute < 0 {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if d := now.Sub(g.last); d > 0 {
		g.tokens = min(g.perMinute, g.tokens+d.Minutes()*g.perMinute)
		g.last = now
	}
	if g.tokens < 1 {
		return false
	}
	g.tokens--
	return true
}
