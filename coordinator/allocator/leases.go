package allocator

import (
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
)

// leaseOf returns the lease a report's demand gets, or nil when the node
// already holds it: a lease the node holds is renewed by the answer's
// renew_unix_nano, and only changed leases are sent again. It runs under
// the pool's shard lock.
//
// What a node may hold is never counted below what it was sent, nor below
// what it holds: an increase counts at once (if the answer is lost, the
// node holds less than counted, which is safe), a decrease only once the
// node's report shows it holds it (observe takes held from the report,
// whose held_seq names the lease). Counting a decrease as applied when
// its answer was computed broke Σ max(held, granted) ≤ limit × (1 +
// tolerance) whenever the answer never arrived: a caller that had given
// up, a lost connection. The node kept spending its old lease while the
// room it was to give up went to others (1,500 of a capacity limit of
// 1,000 for three seconds: TestLostDecreaseStaysCounted).
//
// Counting an increase only once reported let every division until then
// hand the same room out again: a global rule's first divisions granted
// the first reporters the shares the other nodes held unreported, and ten
// gateways admitted 160% of a capacity limit for a second on real
// processes (issue 11). In a window pool so does the next count a node
// switches to at the boundary, where what each holds becomes what it will
// hold next.
func (a *Allocator) leaseOf(p *pool, c *class, cl *claim, held heldLease, epoch uint64, now int64) *allotpb.Lease {
	if cl.seq == 0 || (held.epoch == epoch && held.seq == cl.seq) {
		return nil
	}
	l := a.leaseFor(p, c, cl, epoch, now)
	cl.held = max(cl.held, cl.grant)
	if p.rule.Algorithm.Windowed() {
		cl.nextHeld = max(cl.nextHeld, cl.next)
	}
	return l
}

// leaseFor builds the lease a claim's grant gives its node.
func (a *Allocator) leaseFor(p *pool, c *class, cl *claim, epoch uint64, now int64) *allotpb.Lease {
	l := &allotpb.Lease{
		Rule:            p.key.rule,
		Key:             p.key.key,
		Tenant:          c.key.tenant,
		Priority:        c.key.priority,
		Limit:           cl.grant,
		ExpiresUnixNano: now + a.ttl.Load(),
		Epoch:           epoch,
		Seq:             cl.seq,
	}
	if p.rule.Algorithm.Windowed() {
		l.WindowUnixNano, l.NextLimit = p.window, cl.next
		// The node's process counts from zero: what its predecessor spent
		// is not its to spend again.
		l.Limit = cl.grant - cl.prior
	}
	switch {
	case l.Limit < minLease && (cl.held > 0 || cl.committed > 0):
		// Nothing more for a node that holds a lease or has spent is the
		// smallest lease there is, not none: a lease of 0 returns a node
		// to its unleased share.
		l.Limit = minLease
	case l.Limit < minLease:
		// For a node holding nothing, a grant this small is the hand-over
		// guard's rounding (an increase scaled by room that is a few ulps
		// of the limit: 1.42e-14 in make demo), not a share: it is none,
		// and the node keeps its unleased share as a node not funded yet
		// does. Sent as a lease, it reached algo as a limit too small to
		// express, which refused it.
		l.Limit = 0
	}
	if p.rule.Algorithm.Windowed() && l.NextLimit < minLease && l.Limit > 0 {
		// Nothing for the next windows is the smallest count there is
		// too: a next count of 0 is none, and the node would apply its
		// count for this window to the next ones, which the pool has
		// handed to others.
		l.NextLimit = minLease
	}
	l.Burst = burstShare(p, l.Limit)
	return l
}

// minLease stands for "nothing more" in a lease. A window's counts are
// whole, so a node holding it admits at most one unit more in the window;
// a rate's share this small admits about one unit in a hundred years.
const minLease = 1e-6

// burstShare is a grant's part of the pool's burst: the rule's burst,
// scaled like the pool's limit (by plan and region), in proportion to the
// grant.
func burstShare(p *pool, grant float64) float64 {
	return lease.BurstShare(p.limit, p.rule.BurstFor(p.limit), grant)
}
