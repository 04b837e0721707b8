package allocator

import (
	"math"
	"time"

	"github.com/allot-io/allot/algo"
	allotpb "github.com/allot-io/allot/proto"
)

// Folded is a report taken into the allocator and waiting for its answer:
// at once when every pool it reported stands divided, or after the next
// round when one must be divided again first (stale).
//
// A folded report keeps what its answer needs and not the report: the
// report's header, and per entry the pool, class and claim it went to and
// the lease the node said it holds. Until its round comes (a round
// interval, longer when the leader is behind), a report kept whole held
// its decoded demand, about 265 bytes a key, and a leader's in-flight
// reports were most of its heap (issue 41: the leader's memory at
// 100 gateways × 2,000 tenants; BenchmarkWaitingReportMemory).
type Folded struct {
	req   *allotpb.ReportRequest // the header alone (allotpb.ReportHeader)
	node  int32
	epoch uint64
	// entries are where each demand was folded in, in the demand's order;
	// a demand that got no claim (no pool, a local rule) has none.
	entries []foldedEntry
	// stale is set when a pool the report touched must be divided again
	// before the node's lease in it is answered: its claim is new or
	// coming back, its demand moved beyond the noise, or it asked for a
	// top-up. The answer then waits for the next round.
	stale bool
}

// Stale reports whether the report's answer waits for the next round
// (AwaitRound): a pool it reported must be divided again first.
func (f *Folded) Stale() bool { return f.stale }

// foldedEntry is where one demand went: its pool, class and claim (the
// claim's index, a hint: claims come and go until the answer), and the
// lease the node said it holds (KeyDemand's held_epoch and held_seq).
type foldedEntry struct {
	sh   *allocShard
	p    *pool
	c    *class
	i    int
	held heldLease
}

// heldLease names a lease a node holds: the epoch and sequence number
// of the division that granted it.
type heldLease struct{ epoch, seq uint64 }

// fold takes one node's report into the allocator: its demand, what it
// holds and what it spent, per key. No pool is divided here: a pool the
// report changed is marked for the next round, and the report is answered
// from the grants that round leaves (answer), so that however many nodes
// report between two rounds, each pool is divided once (a division is
// O(its claims), and dividing at every report made an interval's work
// grow like nodes² × tenants: issue 41). A node leaving releases
// everything it held, and is answered with no lease.
func (a *Allocator) fold(req *allotpb.ReportRequest, now int64) *Folded {
	node, inc, demands := req.GetNode(), req.GetIncarnation(), req.GetDemand()
	urgent, leaving := req.GetUrgent(), req.GetLeaving()
	interval := time.Duration(req.GetIntervalNano())
	a.mu.Lock()
	info := a.nodes[node]
	if info == nil {
		info = &nodeInfo{index: a.next}
		a.nodes[node] = info
		a.next++
		a.counted.valid = false // in the fleet's count at once
	}
	info.lastSeen, info.region = now, req.GetRegion()
	if !urgent && !leaving {
		info.cut = now
		if sent := req.GetSentUnixNano(); sent > 0 {
			info.cut = min(sent, now)
		}
	}
	if a.global {
		info.sawGroup(req.GetReporterGroup(), now, a.ttl.Load())
	}
	if leaving {
		info.lastSeen = 0 // out of the fleet's count at once; its claims go below
		a.counted.valid = false
	}
	f := &Folded{req: allotpb.ReportHeader(req), node: info.index, epoch: a.epoch}
	if kept := a.kept.Load(); kept != nil {
		if _, ok := (*kept)[info.index]; ok {
			a.unkeep(info.index)
		}
	}
	learning := now < a.learnEnd
	ruleMap := a.rules
	a.mu.Unlock()

	if interval <= 0 {
		interval = time.Duration(a.interval.Load())
	}
	var held shardHold
	defer held.release()
	for _, d := range demands {
		r := ruleMap[d.GetRule()]
		if r == nil || r.Local || r.Unlimited {
			continue
		}
		own, ok := demandLimit(r, d)
		if !ok {
			continue // a limit on a key not named for it: no lease
		}
		k := poolKey{d.GetRule(), d.GetKey()}
		sh := a.shard(k)
		held.take(sh)
		p := sh.pools[k]
		if p != nil && now-p.folded >= a.ttl.Load() && a.lapsed(p, now) {
			// Every claim expired, and the shard's full pass, which
			// drops such a pool, has not come yet: the key is made
			// again, as if it had (a young pool, which learns from what
			// its nodes hold; see allocatePool).
			delete(sh.pools, k)
			p.dropped, p = true, nil
		}
		if p == nil || p.own != own {
			pr, ok := own.ruleWith(r)
			if !ok {
				continue // the rule's algorithm cannot take it: no lease
			}
			if p == nil {
				p = &pool{key: k, rule: pr, born: now}
				if r.Fair() {
					p.ruleLimit = r.Limit
					p.byClass = map[classKey]int{}
				}
				sh.pools[k] = p
			}
			p.rule, p.own = pr, own
		}
		o, overridden := a.overrides.get(d.GetRule(), d.GetTenant())
		switch {
		case own.limit != 0:
			p.ruleLimit, p.tenant, p.plan = own.limit, d.GetTenant(), d.GetPlan()
		case !r.Fair():
			// The cap of the tenant's limit, which agents enforce too: the
			// limit itself, or with overage the limit times up_to.
			p.ruleLimit, p.tenant, p.plan = r.Cap(r.LimitWith(o, overridden, d.GetTenant(), d.GetPlan())), d.GetTenant(), d.GetPlan()
		}
		p.limit = a.poolLimit(k, p.rule, p.ruleLimit, max(p.window, d.GetWindowUnixNano()), now)
		if a.global && !leaving {
			p.sawRegion(req.GetRegion(), req.GetReporterGroup(), now)
		}
		c := p.class(classKey{d.GetTenant(), d.GetPriority()}, r, r.WeightWith(o, overridden, d.GetTenant(), d.GetPlan()))
		cl, at := c.claim(info.index)
		if !leaving {
			p.folded = now
		}
		if !leaving {
			f.entries = append(f.entries, foldedEntry{sh: sh, p: p, c: c, i: at, held: heldLease{d.GetHeldEpoch(), d.GetHeldSeq()}})
		}
		// An early report asks for a top-up. When the pool is contended the
		// node is simply at its share, and the next round will do; when it
		// is not, the node's demand rose and spare capacity can follow it
		// now.
		// A claim coming back (left, or a new process under the node's
		// name) is always taken in: its last grant was its predecessor's.
		back := cl.left != 0 || (cl.reported && cl.inc != inc)
		topUp := urgent && (!p.contended || cl.est == 0 || back)
		moved := false
		seen := sighting{inc: inc, now: now, interval: interval, urgent: urgent, leaving: leaving, learning: learning}
		if !urgent || topUp {
			before := cl.est
			a.observe(p, cl, d, seen)
			// Divided at the next round: in a window pool every grant
			// includes what its node has spent in the window, which each
			// report changes.
			sh.markDirty(p)
			// Demand that moved (beyond the estimator's noise band) is
			// divided at the next round, and this answer waits for it:
			// the node hears of its new share in this answer, not an
			// interval later.
			moved = math.Abs(cl.est-before) > a.est.Band*math.Max(before, cl.est)
		} else if p.rule.Algorithm == algo.FixedWindow {
			// What the node spent is a fact whatever its demand: a grant
			// divided from a count an early report had outdated went
			// below what the node had spent, and the coordinator, taking
			// the decrease as given up, handed the difference to the
			// others (a new tenant's first window reached 114% of its
			// quota over ten gateways in the simulator, 121% on real
			// processes). (A sliding window's count is an estimate that
			// weighs the previous window in; folding it in at every early
			// report raised every grant to it.)
			seen.spentOnly = true
			a.observe(p, cl, d, seen)
			sh.markDirty(p)
			moved = true
		} else {
			cl.lastSeen = now
			if d.GetHeldEpoch() == f.epoch && d.GetHeldSeq() == cl.seq && cl.seq != 0 && cl.inc == inc {
				// The node holds the lease of the last division: one that
				// lowered what it held counts as given up now (see
				// leaseOf), and the room goes to others at the next round.
				if cl.held > cl.grant || cl.nextHeld > cl.next {
					cl.held, cl.nextHeld = cl.grant, cl.next
					sh.markDirty(p)
				}
			}
		}
		// The answer waits for the next round when this report changed
		// what the node should hold: a claim never divided, a top-up
		// asked for, demand that moved beyond the noise, a claim coming
		// back. Otherwise the last round's grant is answered at once:
		// other nodes' reports since, and this one's small changes, reach
		// the node at its next report. (Waiting at every report, every
		// report of a contended pool and of every window pool waited for
		// a round: at 100 gateways half the reports were answered after
		// the agents' half-interval attempt had given up.) A leaving node
		// is answered nothing; its share is freed at the next round.
		if !leaving && (topUp || moved || back || cl.seq == 0) {
			f.stale = true
		}
	}
	return f
}

// answer returns the leases a folded report gets from the pools'
// divisions as they stand: only the leases that changed, as the node
// renews the others by the answer's renew_unix_nano. A leaving node gets
// none.
func (a *Allocator) answer(f *Folded, now int64) []*allotpb.Lease {
	var leases []*allotpb.Lease
	var held shardHold
	defer held.release()
	for _, e := range f.entries {
		held.take(e.sh)
		// A pool dropped since the report was folded (a rule change, a
		// new term) gets this node's claim at its next report.
		if !e.p.dropped {
			if cl := e.c.find(f.node, e.i); cl != nil {
				if l := a.leaseOf(e.p, e.c, cl, e.held, f.epoch, now); l != nil {
					leases = append(leases, l)
				}
			}
		}
	}
	return leases
}

// shardHold keeps a shard's lock across the consecutive entries of a
// report that fall in it (a global rule's classes all do), up to
// holdEntries at a time, so that others' reports get their turn.
type shardHold struct {
	sh *allocShard
	n  int
}

const holdEntries = 256

func (h *shardHold) take(sh *allocShard) {
	if h.sh == sh && h.n < holdEntries {
		h.n++
		return
	}
	h.release()
	sh.mu.Lock()
	h.sh, h.n = sh, 1
}

func (h *shardHold) release() {
	if h.sh != nil {
		h.sh.mu.Unlock()
		h.sh = nil
	}
}

// report folds a report in and answers it, dividing first, as a round
// would, when the answer waits for one: what a leader whose next round
// comes at once answers. Tests and the Engine's synchronous Report use it.
func (a *Allocator) report(req *allotpb.ReportRequest, now int64) []*allotpb.Lease {
	f := a.fold(req, now)
	if f.stale {
		a.Tick(now)
	}
	return a.answer(f, now)
}
