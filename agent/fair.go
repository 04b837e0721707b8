package agent

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// fairState enforces a global rule, shared by tenants at priorities. The
// node holds one limiter for its whole share (the store's single limiter),
// and one per class (tenant at a priority) that the coordinator has granted
// a lease: a request must pass its class's lease, if any, and the node's
// total. The node's total also sheds by priority on its own: batch
// requests may not take the last 20% of it, interactive ones the last 5%,
// so that when the rule binds, lower priorities are refused first even
// before the coordinator re-divides it. Exempt requests are never refused.
type fairState struct {
	classes atomic.Pointer[map[classKey]*hotKey]
	pending pendingSet
}

// classKey identifies a class: a tenant (by its hash) at a composed
// priority.
type classKey struct {
	tenant   algo.Hash
	priority uint32
}

// reserve is the fraction of the node's total a priority may not take.
func reserve(p Priority) float64 {
	switch p {
	case Batch:
		return 0.2
	case Interactive:
		return 0.05
	}
	return 0
}

// reserveUnits is the reserve in whole units of a total that admits at
// most limit at once. A total too small to hold a whole unit of reserve
// (a GCRA rule with no burst) reserves nothing: shedding by priority is
// then left to the coordinator's class leases.
func reserveUnits(p Priority, limit int64) int64 {
	return int64(reserve(p) * float64(limit))
}

// classPriority composes a request's priority with its tenant's plan rank:
// priority first, then plan, so that batch is shed before interactive and,
// within a priority, a free plan before a paid one.
func classPriority(rs *ruleState, req *Request) uint32 {
	if req.Priority == Exempt {
		return uint32(lease.PriorityExempt)
	}
	return uint32(req.Priority.shedRank())<<4 | uint32(rs.rule.RankFor(req.Plan))
}

// decide is ruleState.decide for a global rule: a request passes its
// class's lease, if the class has one, and the node's total, which keeps
// each priority's reserve. A class's lease refusing is answered by what
// borrowing does (borrow). A spend counts the request in its class, and a
// coordinated rule's class not yet reported asks to be; a peek counts
// nothing and asks for no class. A give-back returns the cost to the
// total and the class.
func (f *fairState) decide(a *Agent, rs *ruleState, st *limitStore, req *Request, rh *reqHashes, now time.Time, cost int64, o op) result {
	var class *hotKey
	if classes := *f.classes.Load(); len(classes) > 0 || rs.coordinated && o == opSpend {
		ck := classKey{rh.get(a, req, rules.AttrTenant), classPriority(rs, req)}
		class = classes[ck]
		if class == nil && rs.coordinated && o == opSpend {
			h := ck.tenant.Then(a.prioHash[ck.priority&0xff])
			if !f.pending.seen(h) {
				f.pending.add(h, nil, req, ck.priority)
			}
		}
	}
	if o >= opGiveBack {
		// A request its class borrowed took nothing from the class's
		// lease, yet is given back to it too: a give-back cannot tell,
		// and the class gains at most the cost, within its lease's burst.
		if req.Priority != Exempt {
			st.single.ReturnAt(now, cost)
		}
		if class != nil {
			if class.leased.Load() {
				class.decide(a, now, cost, opGiveBack)
			} else {
				class.admitted.Add(-cost)
			}
		}
		return result{}
	}
	if req.Priority == Exempt {
		// Never refused; what it uses is still taken from the node's total.
		var d algo.Decision
		if o == opSpend {
			d = st.single.AllowAt(now, cost)
		} else {
			d = st.single.PeekAt(now, cost)
		}
		if class != nil && o == opSpend {
			class.admitted.Add(cost)
		}
		r := fromAlgo(&d)
		r.retry = 0
		return r
	}
	var cd result
	leased := class != nil && class.leased.Load()
	if leased {
		if cd = class.decide(a, now, cost, o); !cd.allowed() {
			return f.borrow(class, st, req, now, cost, cd, o)
		}
	}
	refuse := func(r result) result {
		if o != opSpend {
			return r
		}
		if leased {
			class.decide(a, now, cost, opGiveBack)
		}
		if class != nil {
			class.denied.Add(cost)
		}
		return r
	}
	closed := &st.closed[req.Priority&3]
	if c := closed.Load(); c != 0 && now.UnixNano() < c {
		wait := time.Duration(c - now.UnixNano())
		return refuse(result{0, 1, wait, wait})
	}
	var d algo.Decision
	if o == opSpend {
		d = st.single.AllowAt(now, cost)
	} else {
		d = st.single.PeekAt(now, cost)
	}
	if !d.Allowed {
		return refuse(fromAlgo(&d))
	}
	// left is what the request leaves of the node's total.
	left := d.Remaining
	if o == opPeek {
		left -= cost
	}
	// The priority's reserve: what a lower priority may not take of the
	// node's total. Checked after spending, so the usual case costs one
	// call; a request that dipped into the reserve is given back, and the
	// priority is closed until the total has refilled past its reserve,
	// so that while it is in the reserve its refusals take no lock. When
	// it will have refilled is a peek's answer, for the reserve and the
	// request: a probe that spent them, even to give them back at once,
	// would hold them out of the total meanwhile, and refuse requests
	// other goroutines decide in that instant.
	if reserve := reserveUnits(req.Priority, d.Limit); left < reserve {
		if o == opSpend {
			st.single.ReturnAt(now, cost)
		}
		retry := max(a.interval()/10, time.Millisecond)
		probe := st.single.PeekAt(now, reserve+cost)
		if !probe.Allowed && probe.RetryAfter > 0 {
			retry = probe.RetryAfter
			if o == opSpend {
				closed.Store(now.UnixNano() + int64(retry))
			}
		}
		// The total's reset as it stands, nothing spent: the probe's.
		return refuse(result{left + cost, d.Limit, retry, probe.ResetAfter})
	}
	if class != nil && !leased && o == opSpend {
		class.admitted.Add(cost)
	}
	if leased {
		// The class is the tighter of the two when it leaves less of its
		// lease than the request leaves of the total.
		cleft := cd.remaining
		if o == opPeek {
			cleft -= cost
		}
		if cleft*d.Limit < left*cd.limit {
			return cd
		}
	}
	return fromAlgo(&d)
}

// borrowFloor is how full the node's total must stay for a class past its
// lease to borrow from it: a total that stays over half full is one the
// node's other classes are not using.
const borrowFloor = 0.5

// minBorrowLimit is the smallest total, in units admitted at once, that
// lends. A total with less burst cannot tell idle capacity from busy: one
// with no burst is empty after every request, however idle it was. Rules
// that want idle shares lent need a burst (docs/rules.md).
const minBorrowLimit = 4

// borrow admits a request its class's lease refused when the node's total
// has room the other classes are leaving unused. Weighted max-min fairness
// is work-conserving: a class's share is what it is guaranteed, not all it
// may have, and capacity one tenant leaves idle between reports belongs to
// those who want more. Without borrowing, every tenant's dip below its
// estimate is lost to the fleet, and every rise above it is refused while
// the rule is under its limit. Borrowing never exceeds the node's total,
// so the rule's limit holds; it only stops short of the floor, so a class
// within its lease always finds the total open. A peek answers what
// borrowing would, and spends nothing.
func (f *fairState) borrow(class *hotKey, st *limitStore, req *Request, now time.Time, cost int64, refused result, o op) result {
	var d algo.Decision
	if o == opSpend {
		d = st.single.AllowAt(now, cost)
	} else {
		d = st.single.PeekAt(now, cost)
	}
	if !d.Allowed {
		return refused
	}
	left := d.Remaining
	if o == opPeek {
		left -= cost
	}
	if floor := max(int64(math.Ceil(borrowFloor*float64(d.Limit))), reserveUnits(req.Priority, d.Limit)); d.Limit < minBorrowLimit || left < floor {
		if o == opSpend {
			st.single.ReturnAt(now, cost)
		}
		return refused
	}
	if o == opSpend {
		class.denied.Add(-cost)
		class.admitted.Add(cost)
	}
	return fromAlgo(&d)
}

// class finds the class a lease names. A tenant name the protocol cannot
// carry as it is travels in its bounded form (allotpb.BoundName), which
// does not hash like the name; such classes are found by that form, kept
// in each class's wireTenant.
func (f *fairState) class(a *Agent, tenant string, priority uint32) *hotKey {
	classes := *f.classes.Load()
	if hk := classes[classKey{a.hasher.String(tenant), priority}]; hk != nil {
		return hk
	}
	for k, hk := range classes {
		if k.priority == priority && hk.wireTenant == tenant {
			return hk
		}
	}
	return nil
}

// demoteClasses drops the classes that have been idle long enough
// (hotKey.idleLongEnough), giving up their leases: the node's total is
// then the leases of the classes still busy, and the coordinators forget
// the classes' claims a lease period later. Traffic that returns makes a
// class again.
func (f *fairState) demoteClasses(rs *ruleState, now time.Time) {
	old := *f.classes.Load()
	var gone []classKey
	for k, hk := range old {
		hk.countIdle(now)
		if hk.idleLongEnough(&rs.rule, now) {
			gone = append(gone, k)
		}
	}
	if len(gone) == 0 {
		return
	}
	next := make(map[classKey]*hotKey, len(old))
	for k, v := range old {
		next[k] = v
	}
	for _, k := range gone {
		if hk := next[k]; hk.leased.Load() {
			hk.unlease(rs, now)
		}
		delete(next, k)
	}
	f.classes.Store(&next)
}

// promoteClasses turns classes that showed traffic into reported classes.
// Their limiters enforce nothing until a lease arrives (leased is false):
// until then the node's total alone applies.
func (f *fairState) promoteClasses(a *Agent, rs *ruleState) {
	waiting := f.pending.take()
	if len(waiting) == 0 {
		return
	}
	old := f.classes.Load()
	next := make(map[classKey]*hotKey, len(*old)+len(waiting))
	for k, v := range *old {
		next[k] = v
	}
	for _, pk := range waiting {
		k := classKey{a.hasher.String(pk.tenant), pk.priority}
		if _, ok := next[k]; ok || len(next) >= a.cfg.MaxHotKeys {
			continue
		}
		hk, err := newHotKey(rs, rs.def, pk, a.clock.local())
		if err != nil {
			continue
		}
		next[k] = hk
	}
	f.classes.Store(&next)
}
