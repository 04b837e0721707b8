package intake

import (
	"sync"
	"sync/atomic"
	"time"
)

// Bound bounds the reports the leader takes at once. A report taken
// holds a goroutine, its decoded request and its folded entries until it
// is answered; a leader taking every report that arrived, however many
// were under way, queued them without bound when it fell behind, each
// answered long after its caller had left, until it ran out of memory
// (issue 41: 6,900 goroutines and 2.8 GB at 100 gateways). Past the
// bound a report is answered at once without being taken: shed.
//
// Early reports are shed first, from half the bound, and while allocation
// rounds overrun their interval: they ask for more sooner, which a leader
// behind on its rounds cannot give anyway. A regular report is shed only
// at the bound itself, and never, below it, a node's first report of the
// term: a new leader learns what the fleet holds from those.
type Bound struct {
	max      int64 // 0: unbounded
	inFlight atomic.Int64
}

// NewBound returns a bound of bound reports in flight; 0 or less is no
// bound.
func NewBound(bound int) *Bound {
	return &Bound{max: int64(max(bound, 0))}
}

// Take reports whether a report may be taken, and if so counts it in
// flight until Done. urgent says it is an early report, known that its
// node has reported to this leader, behind that the last round overran.
func (in *Bound) Take(urgent, known, behind bool) bool {
	n := in.inFlight.Add(1)
	if in.max == 0 {
		return true
	}
	shed := n > in.max
	if known && urgent && (behind || n > in.max/2) {
		shed = true
	}
	if shed {
		in.inFlight.Add(-1)
	}
	return !shed
}

// Done ends a report Take took.
func (in *Bound) Done() { in.inFlight.Add(-1) }

// InFlight is the number of reports taken and not done.
func (in *Bound) InFlight() int64 { return in.inFlight.Load() }

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
