package allocator

import (
	"slices"
	"time"

	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// claim is one node's part in a class.
type claim struct {
	node      int32
	est       float64 // smoothed demand
	held      float64
	committed float64
	lastSeen  int64
	grant     float64
	// Window pools: next is the node's share of the windows after the
	// current one, and nextHeld what it will switch to at the next
	// boundary (as it reported, or as last sent if that was less).
	next, nextHeld float64
	seq            uint64 // allocation that produced grant; 0 = none yet
	// base is what the node held when it first reported to this leader:
	// a lease from the previous leader, or nothing. Learning mode divides
	// no more than the bases add up to.
	base     float64
	reported bool
	// inc is the incarnation of the node's process that last reported,
	// and prior, in a window pool, what the node's earlier incarnations
	// spent in the current window: a process restarted mid-window counts
	// from zero, so what the node holds and has spent is prior plus what
	// it reports, and its lease is its grant less prior. Forgetting what
	// the process it replaced had spent granted the window that much
	// twice (a rolling deploy reached 108% of a quota on real processes).
	inc   uint64
	prior float64
	// left is when the node left (ns), 0 while it serves. A leaving node
	// spends nothing more, but what it held stays counted, granted to
	// nobody, for leaveHold report intervals: in a deploy its replacement
	// starts on its unleased share meanwhile, and handing the share to
	// the others at once put both on top of each other (a rolling deploy
	// peaked at 138% of a quota on real processes).
	left int64
}

// sighting is what observe needs of the report a demand came in.
type sighting struct {
	inc                       uint64 // the reporting process's incarnation
	now                       int64
	interval                  time.Duration
	urgent, leaving, learning bool
	// spentOnly folds in what the node spent and holds, not its demand:
	// an early report of a contended pool, whose node is simply at its
	// share.
	spentOnly bool
}

// observe folds one demand report into a claim.
func (a *Allocator) observe(p *pool, cl *claim, d *allotpb.KeyDemand, r sighting) {
	inc, now, interval, urgent, leaving, learning := r.inc, r.now, r.interval, r.urgent, r.leaving, r.learning
	cl.lastSeen = now
	window := p.rule.Algorithm.Windowed()
	w := d.GetWindowUnixNano()
	if window && w > p.window {
		// At a window boundary every node switches to the share it was
		// told for the next windows (next_limit), and keeps applying it
		// until told otherwise: what each holds still counts in the new
		// window, for the hand-over guard, and only what they spent in the
		// old one is forgotten. Zeroing the others' leases at the first
		// report of a window let the guard grant one node more while the
		// others went on spending theirs (issue 11: 104–128% of a quota).
		p.window = w
		for _, c := range p.classes {
			for i := range c.claims {
				c.claims[i].committed, c.claims[i].prior = 0, 0
				c.claims[i].held = c.claims[i].nextHeld
			}
		}
	}
	// current: the report is about the pool's window.
	current := window && w == p.window
	if current && cl.inc != 0 && inc != cl.inc {
		// A new process under the node's name, in the window its
		// predecessor spent in: it counts from zero.
		cl.prior = cl.committed
	}
	cl.inc = inc
	if leaving {
		// A leaver's demand is no more, but its final count stays
		// counted: its replacement, if it comes in this window, starts
		// after it.
		cl.left = now
		if current {
			cl.committed = max(cl.committed, cl.prior+d.GetCommitted())
		}
		return
	}
	cl.left = 0 // back, or its replacement under the same name
	if iv := d.GetIntervalNano(); iv > 0 && time.Duration(iv) < interval {
		interval = time.Duration(iv)
	}
	obs := lease.Observation{Admitted: d.GetAdmitted(), Denied: d.GetDenied(), Interval: interval}
	switch {
	case r.spentOnly:
	case urgent:
		// An early report covers part of an interval: it may raise the
		// estimate (the node is running low) but not lower it; the next
		// regular report does that.
		cl.est = max(cl.est, a.est.Next(0, obs, p.rule.Period))
	default:
		cl.est = a.est.Next(cl.est, obs, p.rule.Period)
	}
	cl.held = d.GetHeld()
	if current {
		cl.held += cl.prior
	}
	cl.nextHeld = d.GetNextHeld()
	if cl.nextHeld == 0 {
		cl.nextHeld = cl.held // an agent applying its lease to every window
	}
	if !cl.reported {
		cl.base, cl.reported = cl.held, true
		if learning && !window {
			// A new leader's first look at a node is one interval's count,
			// noisy, and dividing by it would move shares back and forth
			// (each decrease applied at once, each increase a report
			// later). The lease the node holds is its predecessor's
			// estimate of its demand: start from the larger of the two.
			cl.est = max(cl.est, cl.held)
		}
	}
	switch {
	case current:
		cl.committed = cl.prior + d.GetCommitted()
	case window:
		// A node whose clock lags reports its count for a window that is
		// over here, which says nothing of what it spent in this one; at
		// its own boundary it switches to its next count, which may be
		// more.
		cl.held = max(cl.held, cl.nextHeld)
	}
}

// class returns the pool's class for a tenant and priority, creating it.
func (p *pool) class(k classKey, r *rules.Rule, weight float64) *class {
	if !r.Fair() {
		if len(p.classes) == 0 {
			p.classes = []*class{{key: classKey{tenant: k.tenant}, weight: 1}}
		}
		return p.classes[0]
	}
	if i, ok := p.byClass[k]; ok {
		p.classes[i].weight = weight // an override may have changed it
		return p.classes[i]
	}
	c := &class{key: k, weight: weight}
	p.byClass[k] = len(p.classes)
	p.classes = append(p.classes, c)
	return c
}

// find returns the class's claim of a node, or nil. hint is where the
// claim was last seen (-1: nowhere): claims come and go, and a hint is
// checked before it is trusted.
func (c *class) find(node int32, hint int) *claim {
	if hint >= 0 && hint < len(c.nodes) && c.nodes[hint] == node {
		return &c.claims[hint]
	}
	if i, found := slices.BinarySearch(c.nodes, node); found {
		return &c.claims[i]
	}
	return nil
}

// claim returns the class's claim of a node, creating it, and where it is
// among the class's claims.
func (c *class) claim(node int32) (*claim, int) {
	i, found := slices.BinarySearch(c.nodes, node)
	if !found {
		c.claims = slices.Insert(c.claims, i, claim{node: node})
		c.nodes = slices.Insert(c.nodes, i, node)
	}
	return &c.claims[i], i
}

// dropClaims deletes the claims del picks, keeping nodes in step.
func (c *class) dropClaims(del func(claim) bool) {
	c.claims = slices.DeleteFunc(c.claims, del)
	if len(c.claims) == len(c.nodes) {
		return
	}
	c.nodes = c.nodes[:len(c.claims)]
	for i := range c.claims {
		c.nodes[i] = c.claims[i].node
	}
}

// dropEmptyClasses forgets a fair pool's classes that hold no claim: a
// tenant gone quiet leaves nothing of its class behind, and its next
// report makes the class again, with its weight. Kept, every tenant a
// global rule had seen stayed in its pool for the leader's whole term,
// divided at every round: the soak's leaders grew with its stream of new
// tenants (anonymous memory ×2.1 over a 15-minute term, where followers
// stayed flat). A report answered after its class went finds no claim
// there, as after its claim expired: no lease.
func (p *pool) dropEmptyClasses() {
	if p.byClass == nil {
		return // one class, gone with the pool when it is empty
	}
	kept := p.classes[:0]
	for _, c := range p.classes {
		if len(c.claims) > 0 {
			kept = append(kept, c)
		} else {
			delete(p.byClass, c.key)
		}
	}
	if len(kept) == len(p.classes) {
		return
	}
	clear(p.classes[len(kept):])
	p.classes = kept
	for i, c := range p.classes {
		p.byClass[c.key] = i
	}
}

// nodesHeard is how many nodes have a claim in the pool: in any class of
// a fair rule (a node that reported one tenant of a global rule is no
// longer spending its unleased share of the rule's total unseen).
func (p *pool) nodesHeard() int {
	if len(p.classes) == 1 {
		return len(p.classes[0].claims)
	}
	seen := map[int32]struct{}{}
	for _, c := range p.classes {
		for i := range c.claims {
			seen[c.claims[i].node] = struct{}{}
		}
	}
	return len(seen)
}

// leasedBefore reports whether a node reported holding a lease when it
// first reported to the pool: one the pool did not grant.
func (p *pool) leasedBefore() bool {
	for _, c := range p.classes {
		for i := range c.claims {
			if c.claims[i].base > 0 {
				return true
			}
		}
	}
	return false
}

// lapsed reports whether every claim of p has expired at now, as
// allocatePool would find: its nodes silent for a lease period (counting
// leases a shed answer renewed), none of them a leaver or a base a new
// leader learns from. Such a pool is what a full pass drops; until the
// shard's pass comes (once a lease period, at the shard's own phase) it
// must not be taken for a live one, whose claims it no longer has.
func (a *Allocator) lapsed(p *pool, now int64) bool {
	ttl, kept := a.ttl.Load(), a.kept.Load()
	for _, c := range p.classes {
		for _, cl := range c.claims {
			seen := cl.lastSeen
			if kept != nil {
				seen = max(seen, (*kept)[cl.node])
			}
			if cl.left > 0 || cl.lastSeen == 0 || now-seen < ttl {
				return false
			}
		}
	}
	return true
}

func (p *pool) empty() bool {
	for _, c := range p.classes {
		if len(c.claims) > 0 {
			return false
		}
	}
	return true
}
