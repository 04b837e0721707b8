package agent

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
)

// hotKey is a key that needs more than an even share, or the class of a
// global rule: it has its own limiter, sized by its lease, and counts what
// it admits and denies for the next report.
type hotKey struct {
	key    string
	tenant string
	plan   string
	// wireTenant and wirePlan are tenant and plan as reports carry them
	// (allotpb.BoundName), worked out once.
	wireTenant, wirePlan string
	priority             uint32
	store                *limitStore
	rd                   *ruleData // the rule's, for what the algorithm refuses
	lim                  *algo.Limiter

	admitted atomic.Int64 // cost since the last report
	denied   atomic.Int64
	urgent   atomic.Bool  // an early report has been asked for
	askedAt  atomic.Int64 // when, on the agent's clock
	since    int64        // when the key became hot, on the agent's clock

	leased atomic.Bool // a lease sets the limit (read by checks of global rules)
	// ready is set once the key's unleased state is handed over to lim
	// (promote): until then its checks go to the unleased store.
	ready atomic.Bool
	shown atomic.Uint64 // the lease's limit as float64 bits, for readers off the reporter

	// next is a window lease's switch to its next-window count, due at
	// the next window's start: the first check there (or the reporter)
	// makes it. Nil when nothing is due.
	next atomic.Pointer[windowSwitch]
	// limMu orders the changes of the limiter's configuration: a lease
	// applied, a window switch made. Checks take it only to make a switch.
	limMu sync.Mutex

	// Lease state, touched only by the reporter goroutine.
	held     float64 // the lease's limit, per period
	nextHeld float64 // window leases: the count from the next window on
	epoch    uint64
	seq      uint64
	expires  int64 // ns, coordinators' clock
	idle     int   // reports in a row with no traffic
	// lastActive is when a report last found traffic on the key (agent's
	// clock, ns; 0: not yet), for demote.
	lastActive int64
	// refused is set when the coordinators refused the key's demand as
	// malformed: it is no longer reported, and keeps its unleased share.
	refused bool
	// confirm is set when a lease lowered what the key held: the
	// coordinators count the larger lease until a report says the key
	// holds the smaller (an answer can be lost), and what it gave up
	// waits for that, so the next early report carries the key.
	confirm bool
}

// observe counts a decision and, when a leased key runs low, asks for an
// early report so it is topped up before it runs dry.
func (hk *hotKey) observe(a *Agent, r result, cost int64) {
	if r.allowed() {
		hk.admitted.Add(cost)
	} else {
		hk.denied.Add(cost)
	}
	// At most ten times an interval, as often as the agent reports early:
	// a key that stays low (the node is simply at its share of a contended
	// limit) costs the coordinator one key in a batched report. Asking
	// often matters at the end of a window, when the last of a quota is
	// re-divided among the nodes still serving it. A key
	// just made hot asks too, once it has counted a quarter of an interval,
	// so its first lease does not wait for the next regular report.
	if 5*r.remaining < r.limit {
		now := a.clock.local()
		if !hk.leased.Load() && now-hk.since < int64(a.interval()/4) {
			return
		}
		if hk.urgent.Load() && now-hk.askedAt.Load() >= int64(a.interval()/10) {
			hk.urgent.Store(false)
		}
		if !hk.urgent.Load() && hk.urgent.CompareAndSwap(false, true) {
			hk.askedAt.Store(now)
			a.askEarly()
		}
	}
}

// pendingKey is a key waiting to become hot.
type pendingKey struct {
	key, tenant, plan string
	priority          uint32
	// st is the store of the key's call limit, nil for the rule's.
	st *limitStore
	// seeded keys were found busy by their usage: they start with these
	// counts, counted since since (local clock).
	seeded           bool
	admitted, denied int64
	since            int64
}

// pendingSet gathers keys that asked for a lease since the last report. A
// small lock-free filter keeps a key that stays busy from taking the lock
// on every request while it waits.
type pendingSet struct {
	filter [1024]atomic.Uint64
	mu     sync.Mutex
	m      map[algo.Hash]pendingKey
}

// maxPending bounds the keys waiting to become hot between two reports.
const maxPending = 16384

// seen reports whether a key was added lately, without a lock; a key that
// stays busy while it waits asks once.
func (p *pendingSet) seen(h algo.Hash) bool {
	return p.filter[h.Uint64()%uint64(len(p.filter))].Load() == h.Uint64()
}

func (p *pendingSet) add(h algo.Hash, key []byte, req *Request, priority uint32) {
	p.filter[h.Uint64()%uint64(len(p.filter))].Store(h.Uint64())
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[algo.Hash]pendingKey{}
	}
	if _, ok := p.m[h]; ok || len(p.m) >= maxPending {
		return
	}
	p.m[h] = pendingKey{key: string(key), tenant: strings.Clone(req.Tenant), plan: strings.Clone(req.Plan), priority: priority, st: req.lst}
}

// addSeeded adds a key found busy by its counted usage, with its counts.
func (p *pendingSet) addSeeded(h algo.Hash, key []byte, req *Request, admitted, denied, since int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[algo.Hash]pendingKey{}
	}
	if len(p.m) >= maxPending {
		return
	}
	p.m[h] = pendingKey{key: string(key), tenant: strings.Clone(req.Tenant), plan: strings.Clone(req.Plan),
		seeded: true, admitted: admitted, denied: denied, since: since}
}

// take returns the waiting keys and starts a new set.
func (p *pendingSet) take() map[algo.Hash]pendingKey {
	p.mu.Lock()
	m := p.m
	p.m = nil
	p.mu.Unlock()
	for i := range p.filter {
		p.filter[i].Store(0)
	}
	return m
}

// promote turns waiting keys into hot keys, each starting as drained as
// its unleased state, so that promotion never hands out a reset. It runs
// on the reporter goroutine, while checks go on: the new hot keys are
// published first, not yet ready, so checks still go to the unleased
// store; then each key's state is handed over to its limiter under the
// store's lock (algo.Keyed.HandOverHashAt), and from that instant the store
// sends its checks to the hot key. No check is counted in both or in
// neither: four checks under a limit of 3 refuse the fourth even when the
// promotion falls between the third and the fourth.
func (rs *ruleState) promote(a *Agent, now time.Time) {
	waiting := rs.pending.take()
	if len(waiting) == 0 {
		return
	}
	old := rs.hot.Load()
	next := make(map[algo.Hash]*hotKey, len(*old)+len(waiting))
	for h, hk := range *old {
		next[h] = hk
	}
	var fresh []freshKey
	for h, pk := range waiting {
		if _, ok := next[h]; ok || len(next) >= a.cfg.MaxHotKeys {
			continue
		}
		req := Request{Tenant: pk.tenant, Plan: pk.plan, lst: pk.st}
		st := rs.store(&req)
		hk, err := newHotKey(rs, st, pk, a.clock.local())
		if err != nil {
			a.log.Warn("cannot make a key hot", "rule", rs.rule.Name, "error", err)
			continue
		}
		next[h] = hk
		fresh = append(fresh, freshKey{h, hk, st, pk})
		if rs.byKey == nil {
			rs.byKey = map[string]*hotKey{}
		}
		rs.byKey[hk.key] = hk
	}
	rs.hot.Store(&next)
	for _, fk := range fresh {
		fk.st.mu.Lock() // not under the store's key lock: setShare takes this one first
		share := fk.st.share
		fk.st.mu.Unlock()
		fk.st.keyed.HandOverHashAt(fk.h, now, func(d algo.Decision) {
			used := d.Limit - d.Remaining
			if used > 0 {
				fk.hk.lim.AllowAt(now, used)
			}
			rs.startHot(a, fk.hk, fk.pk, share, used, now)
			fk.hk.ready.Store(true) // under the key's lock: see check
		})
	}
}

// freshKey is a key made hot, waiting for its unleased state.
type freshKey struct {
	h  algo.Hash
	hk *hotKey
	st *limitStore
	pk pendingKey
}

// startHot sets a new hot key's counts and limiter from what its unleased
// state had used (used) when it was handed over; share is the store's
// unleased share.
func (rs *ruleState) startHot(a *Agent, hk *hotKey, pk pendingKey, share float64, used int64, now time.Time) {
	switch {
	case pk.seeded:
		hk.admitted.Store(pk.admitted)
		hk.denied.Store(pk.denied)
		hk.since = pk.since
	case a.joining.Load():
		// Asked for at its first check on a new process: the report
		// that promotes it carries it, with what its unleased share
		// counted so far (since the process started, or since its
		// window did) as the rate the coordinators start from.
		hk.admitted.Store(max(used, 0))
		hk.since = a.born
		r := hk.store.ruleOf(rs)
		if r.Algorithm.Windowed() {
			hk.since = max(hk.since, r.WindowStart(now).UnixNano()-a.rep.offset())
		}
		hk.askedAt.Store(a.clock.local())
		hk.urgent.Store(true)
		if !rs.rule.Algorithm.Windowed() {
			// Its predecessor's bucket is unknown: the process is
			// credited what its share earned since it started, not a
			// full burst, which went on top of the one the process it
			// replaced had spent (123% of a token-bucket quota in the
			// second of a restart, TestRestartStaysWithinQuota).
			earned := int64(share*float64(a.clock.local()-a.born)/float64(r.Period)) - max(used, 0)
			if d := hk.lim.AllowAt(now, 0); d.Remaining > max(earned, 0) {
				hk.lim.AllowAt(now, d.Remaining-max(earned, 0))
			}
		}
	}
}

// newHotKey makes a hot key enforcing its store's unleased share until a
// lease arrives.
func newHotKey(rs *ruleState, st *limitStore, pk pendingKey, since int64) (*hotKey, error) {
	st.mu.Lock()
	share := st.share
	st.mu.Unlock()
	r := st.ruleOf(rs)
	cfg, _ := nodeConfig(r, share, r.BurstFor(float64(st.limit))*share/float64(st.limit), true)
	lim, err := algo.New(cfg)
	if err != nil {
		return nil, err
	}
	return &hotKey{key: pk.key, tenant: pk.tenant, plan: pk.plan, wireTenant: allotpb.BoundName(pk.tenant), wirePlan: allotpb.BoundName(pk.plan),
		priority: pk.priority, store: st, rd: rs.ruleData, lim: lim, since: since}, nil
}

// windowSwitch is a window lease's next count, due at a window start.
type windowSwitch struct {
	at  int64 // ns, coordinators' clock
	cfg algo.Config
}

// switchWindow makes a due window switch: the first caller at or past
// its time reconfigures the limiter, so every window starts from the
// count the coordinators decided for it. It is one atomic load when
// nothing is due.
func (hk *hotKey) switchWindow(now time.Time) {
	sw := hk.next.Load()
	if sw == nil || now.UnixNano() < sw.at {
		return
	}
	// Under limMu, so that a lease the reporter applies at the same moment
	// is never overwritten by the count it replaced.
	hk.limMu.Lock()
	defer hk.limMu.Unlock()
	if hk.next.CompareAndSwap(sw, nil) {
		// The count was checked when the lease came (applyLease): this
		// cannot fail but by a bug, which is recorded all the same.
		if err := hk.lim.Reconfigure(sw.cfg, now); err != nil {
			hk.rd.refused("a window lease's next count", err)
		}
	}
}

// applyLease makes a lease the key's limit, if it is newer than the one
// held, or if the cluster was restored from a backup (its epoch went
// backwards: its leases are the truth now). A lease granting nothing (a
// new leader learning, or a node with no demand left) returns the key to
// its unleased share.
func (hk *hotKey) applyLease(rs *ruleState, l lease.Lease, restored bool, now time.Time) {
	if !restored && hk.leased.Load() && !l.Supersedes(lease.Lease{Epoch: hk.epoch, Seq: hk.seq}) {
		hk.expires = max(hk.expires, l.Expires.UnixNano())
		return
	}
	if !(l.Limit > 0) {
		hk.unlease(rs, now)
		hk.epoch, hk.seq = l.Epoch, l.Seq
		return
	}
	hk.limMu.Lock()
	defer hk.limMu.Unlock()
	limit, next := l.Limit, l.Limit
	var sw *windowSwitch
	if r := hk.store.ruleOf(rs); r.Algorithm.Windowed() && l.Next > 0 {
		next = l.Next
		at := r.WindowEnd(l.Window)
		if !now.Before(at) {
			limit = next // the lease's window is over: its next count holds now
		} else if cfg, ok := nodeConfig(r, next, l.Burst*next/limit, true); ok && next != limit {
			if _, err := algo.New(cfg); err != nil {
				rs.refused(fmt.Sprintf("a lease's next count %g", next), err)
				return // the key keeps the lease it has, and reports holding it
			}
			sw = &windowSwitch{at: at.UnixNano(), cfg: cfg}
		}
	}
	// The limit first: a lease the algorithm refuses is not taken, and the
	// key goes on enforcing and reporting the one it holds, so that what
	// it enforces and what it says it holds never part.
	if err := hk.resize(rs, limit, l.Burst*limit/l.Limit, now); err != nil {
		rs.refused(fmt.Sprintf("a lease of %g", limit), err)
		return
	}
	hk.next.Store(sw)
	hk.confirm = hk.confirm || (hk.leased.Load() && (limit < hk.held || next < hk.nextHeld))
	hk.held, hk.nextHeld = limit, next
	hk.epoch, hk.seq, hk.expires = l.Epoch, l.Seq, l.Expires.UnixNano()
	hk.shown.Store(math.Float64bits(limit))
	hk.leased.Store(true)
}

// settle brings the reporter's view of a window lease up to date: a
// switch that is due is made, and once made the next count is the one
// held. Reporter only.
func (hk *hotKey) settle(now time.Time) {
	hk.switchWindow(now)
	if hk.leased.Load() && hk.next.Load() == nil && hk.held != hk.nextHeld && hk.nextHeld > 0 {
		hk.held = hk.nextHeld
		hk.shown.Store(math.Float64bits(hk.held))
	}
}

// leaseLimit is the limit of the key's lease, or 0; safe from any goroutine.
func (hk *hotKey) leaseLimit() float64 {
	if !hk.leased.Load() {
		return 0
	}
	return math.Float64frombits(hk.shown.Load())
}

// resize changes the key's limiter to a share, keeping its state, or
// says why the algorithm refused it (the limiter is then unchanged).
func (hk *hotKey) resize(rs *ruleState, share, burst float64, now time.Time) error {
	if cfg, ok := nodeConfig(hk.store.ruleOf(rs), share, burst, true); ok {
		return hk.lim.Reconfigure(cfg, now)
	}
	return nil
}

// decide is ruleState.decide on the key's own limiter. A spend is counted
// for the next report (observe); a peek counts nothing, though it makes a
// window switch that is due, which is no spending, so that it answers in
// the new window. A give-back takes the cost off what the key admitted,
// and with opGiveBackDenied counts it as denied.
func (hk *hotKey) decide(a *Agent, now time.Time, cost int64, o op) result {
	switch o {
	case opSpend:
		hk.switchWindow(now)
		d := hk.lim.AllowAt(now, cost)
		r := fromAlgo(&d)
		hk.observe(a, r, cost)
		return r
	case opPeek:
		hk.switchWindow(now)
		d := hk.lim.PeekAt(now, cost)
		return fromAlgo(&d)
	}
	hk.lim.ReturnAt(now, cost)
	hk.admitted.Add(-cost)
	if o == opGiveBackDenied {
		hk.denied.Add(cost)
	}
	return result{}
}

// expire unleases the key if its lease has expired at now (coordinators'
// clock, ns), and counts it: a coordinator answered without renewing a
// lease in time.
func (hk *hotKey) expire(rs *ruleState, now int64) {
	if hk.leased.Load() && hk.expires <= now {
		rs.expiries.Add(1)
		hk.unlease(rs, rs.limiterTime(now))
	}
}

// unlease reverts a key whose lease expired to the unleased share.
func (hk *hotKey) unlease(rs *ruleState, now time.Time) {
	hk.limMu.Lock()
	defer hk.limMu.Unlock()
	hk.leased.Store(false)
	hk.next.Store(nil)
	hk.shown.Store(0)
	hk.held, hk.nextHeld, hk.epoch, hk.seq = 0, 0, 0, 0
	hk.store.mu.Lock()
	share := hk.store.share
	hk.store.mu.Unlock()
	if err := hk.resize(rs, share, hk.store.ruleOf(rs).BurstFor(float64(hk.store.limit))*share/float64(hk.store.limit), now); err != nil {
		// The lease is gone either way; the key's limiter keeps the
		// lease's limit, which is said so.
		rs.refused(fmt.Sprintf("the unleased share %g", share), err)
	}
}
