package allocator

import (
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// allocatePool divides one pool's allowance among its present claims.
// Claims silent for longer than a lease period are dropped: their leases
// have expired; so are claims of nodes that left, leaveHold intervals
// after they did, except while learning, when what they held still counts
// among the bases.
func (a *Allocator) allocatePool(sh *allocShard, p *pool, now int64, learning bool) {
	if !learning && p.rule.Scope != rules.Global {
		// A key whose slot moved here divides, for one lease period, as
		// a new leader's do: nodes still hold the source group's leases.
		learning = a.slotLearning(p.tenant, now)
	}
	seq := a.seq.Add(1)
	window := p.rule.Algorithm.Windowed()
	// A new leader cannot know what its predecessor granted to nodes that
	// have not reported yet. For window rules it grants no node more than
	// it holds; for rate rules it divides no more than the reporting nodes
	// held when they first did, and within that follows demand (see
	// lease.Pool.LearnFromBases).
	pl := lease.Pool{Limit: p.limit, Tolerance: p.rule.Tol(), Learning: learning && window, LearnFromBases: learning && !window, Shares: window, Whole: window}
	interval, ttl := a.interval.Load(), a.ttl.Load()
	// A young pool may not have heard from every node with the key:
	// those spend their unleased shares (limit ÷ fleet) unseen, and
	// dividing the whole limit among the nodes heard so far granted the
	// first reporter all of it on top of them (a new tenant's first second
	// reached 128–183% of its quota). Until every node has had its turn,
	// the unleased shares of the nodes not heard from are kept out of the
	// division. A node's turn is a regular report cut after the pool was
	// made: one whose traffic had made the key busy carries it. A pool is
	// young until every node of the fleet has made one (at least a report
	// interval, at most a lease period, after which a silent node is
	// gone). Young for one report interval only, the pool forgot the
	// nodes whose reports came late on a loaded machine: two agents each
	// spent their unleased 5 of a quota of 10, and the one that reported
	// first was granted all 10 (15 admitted, agent.TestResetRestoresQuota).
	// (A new leader's pools are young too; its learning mode covers what
	// unseen nodes hold.)
	//
	// A young pool whose nodes report holding leases is not a new key but
	// one made again: its claims had all expired (the coordinators were
	// out of reach for a lease period, and the nodes kept serving their
	// leases). The nodes not heard from yet hold leases too, not unleased
	// shares, so it learns as a new leader does, from what the nodes
	// report holding. Reserving the fleet's unleased shares instead capped
	// a tenant on 2 of 20 gateways at a tenth of its quota for the second
	// after an outage (16% of the fleet's quotas in the simulator's
	// outage).
	if !learning && now-p.born < ttl {
		t := a.tally(now)
		switch young := now-p.born < interval || t.oldestCut < p.born; {
		case !young:
		case p.leasedBefore():
			pl.Learning, pl.LearnFromBases = window, !window
		default:
			heard := p.nodesHeard()
			if t.n > heard {
				unseen := float64(t.n-heard) * p.limit / float64(t.n)
				pl.Limit = max(p.limit-unseen, 0)
			}
		}
	}
	// What a node that left held is its replacement's for leaveHold
	// intervals (see claim.left): kept out of the others' division, not
	// only counted by the hand-over guard, which would otherwise hand its
	// tolerance to the others meanwhile and, with the replacement back,
	// have the window reach the limit plus the whole tolerance (105.2% in
	// a rolling deploy of 10 sidecars on real processes).
	// What a leaver spent in the current window stays spent until the
	// window ends, however long its replacement takes. The reservation
	// stands in for the leaver's claim, which the division then counts as
	// holding nothing (counting it in both left nothing to divide once
	// leavers had spent the limit, and the others were sent leases of 0,
	// which return a node to its unleased share).
	reserve := func(cl *claim) (float64, bool) {
		switch {
		case cl.left == 0 || learning:
			return 0, false
		case now-cl.left < leaveHold*interval:
			return max(cl.held, cl.committed), true
		}
		return cl.committed, true
	}
	reserved := 0.0
	for _, c := range p.classes {
		for i := range c.claims {
			r, _ := reserve(&c.claims[i])
			reserved += r
		}
	}
	if a.global {
		reserved += a.fallenRegions(p, now)
	}
	pl.Limit = max(pl.Limit-reserved, 0)
	present := func(cl *claim) bool { return cl.lastSeen > 0 && now-cl.lastSeen < 2*interval && cl.left == 0 }
	kept := a.kept.Load()
	expired := func(cl claim) bool {
		if cl.left > 0 {
			// While learning, what a leaver held still counts among the
			// bases, as for a node not heard from; in a window pool, what
			// it spent counts until the window ends.
			return now-cl.left >= leaveHold*interval && !pl.LearnFromBases && !(window && cl.committed > 0)
		}
		seen := cl.lastSeen
		if kept != nil {
			// A node shed since it last reported had its leases renewed
			// by the shed answer: they count until that renewal ends.
			seen = max(seen, (*kept)[cl.node])
		}
		return now-seen >= ttl && !(cl.lastSeen == 0 && pl.LearnFromBases)
	}
	sh.claims, sh.classes = sh.claims[:0], sh.classes[:0]
	demand := 0.0
	for _, c := range p.classes {
		c.dropClaims(expired)
	}
	p.dropEmptyClasses()
	for _, c := range p.classes {
		for i := range c.claims {
			cl := &c.claims[i]
			lc := lease.Claim{Node: cl.node, Present: present(cl), Demand: cl.est, Held: cl.held, Committed: cl.committed, Base: cl.base}
			if _, ok := reserve(cl); ok {
				lc.Held, lc.Committed = 0, 0 // in the reservation
			}
			if lc.Present {
				demand += cl.est + cl.committed
			}
			sh.claims = append(sh.claims, lc)
		}
	}
	// Each class's claims, sliced once sh.claims has stopped growing.
	off := 0
	for _, c := range p.classes {
		n := off + len(c.claims)
		sh.classes = append(sh.classes, lease.Class{Weight: c.weight, Priority: lease.Priority(c.key.priority), Claims: sh.claims[off:n:n]})
		off = n
	}
	p.contended = demand > p.limit
	a.divide(sh, p, pl)
	granted := 0.0
	off = 0
	for _, c := range p.classes {
		for i := range c.claims {
			c.claims[i].grant, c.claims[i].seq = sh.claims[off+i].Grant, seq
			granted += c.claims[i].grant
		}
		off += len(c.claims)
	}
	if window {
		// The next windows' division: shares of the whole limit, nothing
		// spent yet, guarded against what the nodes will switch to.
		for i := range sh.claims {
			sh.claims[i].Committed = 0
		}
		off = 0
		for _, c := range p.classes {
			for i := range c.claims {
				sh.claims[off+i].Held = c.claims[i].nextHeld
			}
			off += len(c.claims)
		}
		a.divide(sh, p, pl)
		off = 0
		for _, c := range p.classes {
			for i := range c.claims {
				c.claims[i].next = sh.claims[off+i].Grant
			}
			off += len(c.claims)
		}
	}
	// The hand-over guard may have held increases back until others
	// confirm their decreases: try again next round.
	p.dirty = p.contended && !learning && granted < 0.999*p.limit
}

// divide runs the allocation of one pool over the shard's claims.
func (a *Allocator) divide(sh *allocShard, p *pool, pl lease.Pool) {
	if p.rule.Fair() {
		sh.alloc.AllocateFair(pl, sh.classes)
	} else {
		lease.Allocate(pl, sh.claims)
	}
}
