package agent

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// ruleState is one rule as the agent enforces it: a store per effective
// limit (the rule's, each plan's, each overridden tenant's), holding the
// node's unleased share for every key, and the hot keys that hold leases.
type ruleState struct {
	rule        rules.Rule
	scope       string
	index       int // position in the rule set, for usage counters
	attrs       []rules.Attr
	coordinated bool
	descriptor  bool // an Envoy descriptor rule
	mode        lease.FailMode
	// windowed rules' limiters run on the coordinators' clock, the
	// others' on the local one (at); clk is the agent's.
	windowed bool
	clk      *clock
	// every is coversAll, worked out once: matches, asked of every rule
	// on every request, is then small enough to be inlined.
	every bool
	// makeStore makes the store of an overridden tenant's keys.
	makeStore func(limit int64, anchor rules.Anchor) (*limitStore, error)
	// makeCallStore makes the store of a call limit's keys (descriptor
	// rules), enforcing r: the rule with the call's limit and period.
	makeCallStore func(r *rules.Rule, burst int64) (*limitStore, error)
	*ruleData
}

// at is the time the rule's limiters run on, given the local time and the
// coordinators' (both Unix ns): the coordinators' clock for window
// algorithms, whose windows must start and end alike on every node, and
// the local monotonic clock for rate algorithms, whose refill must not
// jump when the estimate of the offset to the coordinators does (a step of
// that estimate would otherwise credit or take back that long's refill at
// once).
func (rs *ruleState) at(t *instants) time.Time {
	ns := t.local
	if rs.windowed {
		ns = t.coord
	}
	return time.Unix(0, ns) // once, so that at is inlined
}

// instants are one moment on both clocks (Unix ns), read once per check.
// They are kept as two words, not two time.Times, and each rule makes the
// time.Time it needs in registers: copying a struct of time.Times built by
// a call cost Check a store-forwarding stall, 8% of its time.
type instants struct{ local, coord int64 }

func newInstants(local, coord int64) instants { return instants{local, coord} }

// limiterTime is at for a time the reporter reads on the coordinators'
// clock.
func (rs *ruleState) limiterTime(coord int64) time.Time {
	t := newInstants(coord-rs.clk.offset.Load(), coord)
	return rs.at(&t)
}

// ruleData is a rule's state: its stores and hot keys. When a new rule set
// keeps a rule unchanged, the new ruleState shares the old one's data, so
// no key loses what it has spent.
type ruleData struct {
	def      *limitStore
	byPlan   map[string]*limitStore
	byTenant map[string]*limitStore
	// overrides are the tenants the overrides API changes the rule for
	// (overrides.go); they win over byTenant and byPlan.
	overrides *tenantTable
	// calls are a descriptor rule's stores for the limits calls set
	// (calllimit.go); nil for other rules.
	calls *callLimits

	// hot maps key hashes to keys holding leases. It is replaced whole by
	// the reporter (copy on write), so checks read it without a lock.
	hot     atomic.Pointer[map[algo.Hash]*hotKey]
	byKey   map[string]*hotKey // the same keys by name, for leases; reporter only
	pending pendingSet

	fair *fairState // global rules: classes of tenants and priorities

	fallback atomic.Bool  // running on the fail mode
	fellBack atomic.Int64 // decisions made on the fail mode
	shadowed atomic.Int64 // refusals a shadow rule admitted
	// expiries counts leases that ran out unrenewed and returned their
	// key to its unleased share: at an answer that did not renew them,
	// or dropped with the rest when the rule went onto its fallback
	// fail mode. Counted by the reporter, never on a check.
	expiries atomic.Int64

	// reconfigErrs counts the limits the algorithm refused to take (a
	// share or a lease): the store or key kept enforcing the one it had,
	// and said so. lastReconfigErr is the latest, for the log.
	reconfigErrs    atomic.Int64
	lastReconfigErr atomic.Pointer[string]
	// What the reporter has logged of them, and when (reporter only).
	reconfigLogged   int64
	reconfigLoggedAt int64
}

// logRefused logs, at most once a minute per rule, the limits the
// algorithm refused since the last time. Reporter only.
func (rs *ruleState) logRefused(a *Agent, now int64) {
	n := rs.reconfigErrs.Load()
	if n == rs.reconfigLogged || (rs.reconfigLoggedAt != 0 && now-rs.reconfigLoggedAt < int64(time.Minute)) {
		return
	}
	last := ""
	if p := rs.lastReconfigErr.Load(); p != nil {
		last = *p
	}
	a.log.Error("the rule's algorithm refused a limit; the old one is still enforced and reported", "rule", rs.rule.Name, "refused", n-rs.reconfigLogged, "last", last)
	rs.reconfigLogged, rs.reconfigLoggedAt = n, now
}

// refused records a limit the algorithm refused: what was being set, and
// why. The store or key keeps the limit it had.
func (rd *ruleData) refused(what string, err error) {
	rd.reconfigErrs.Add(1)
	msg := what + ": " + err.Error()
	rd.lastReconfigErr.Store(&msg)
}

// limitStore enforces one effective limit of a rule.
type limitStore struct {
	limit int64 // the rule's limit for these tenants, per period
	// rule is the rule the store enforces where it is not the rule's own:
	// a call limit's, with the call's limit and period (rules.Rule.
	// WithLimit), or a plan's or tenant's, counting the rule's calendar
	// period from their anchor (rules.Rule.Anchored); nil for the rule's
	// own. A call limit's suffix and salt tell its keys apart from the
	// rule's: on the wire, and in the hot keys' hashes.
	rule   *rules.Rule
	suffix string
	salt   algo.Hash
	// callBurst is the call limit's own burst, 0 for the rule's scaled.
	callBurst int64
	keyed     *algo.Keyed
	single    *algo.Striped // global rules: the node's total, shared by every core
	// closed holds, per priority, until when (ns, the agent's clock) the
	// node's total is known to be inside that priority's reserve: its
	// requests are refused with one atomic load (global rules).
	closed [4]atomic.Int64
	mu     sync.Mutex // guards share
	share  float64    // the node's unleased share, per period
}

// nodeConfig is the algo configuration that enforces a node's share of a
// rule: share units per rule period, with burst the node's part of the
// rule's burst.
//
// Rates must be whole numbers in algo, and shares rarely are, so for GCRA
// and the token bucket the period is stretched until the limit is at least
// 1000 units (33.3/s becomes 1000 per 30.03 s): the rate stays exact to
// 0.1%. The agent's clock moves in steps of one tick, so every rate rule
// admits at least one tick's worth at once, or a high rate would be capped
// at one request per tick. Burst shares are rounded up to whole units.
// Window rules count whole units per window; a share below one rounds up
// to one. The coordinators divide window pools in whole units
// (lease.Pool.Whole), so a lease's count is whole already; an even share,
// limit ÷ nodes, is rounded to the nearest.
//
// part says the share is one node's part of a coordinated rule. A sliding
// window's estimate weighs the previous window's count by the time left in
// the window, and a count is whole: a node whose demand fills its part
// stops one unit short of it at the end of every window (the weighted
// previous count is then a small fraction, rounded up). A central counter
// loses that unit once; a fleet of n nodes lost n, 98.3% of a 600/s quota
// over ten gateways. A part of a rule whose intent tolerates overshoot
// has one unit of slack in its estimate (algo.Config.Slack), when the
// tolerance covers it, so that a saturated fleet admits its whole limit;
// the trailing estimate can then be n units over, never more than the
// tolerance, but no aligned window counts more than the part. The unit
// once went on the part's count itself: a node admitted its lease and one
// more, reported having spent that, and was granted it (a window grant is
// at least what its node spent), then admitted one more again, a unit per
// report until the hand-over guard's room stopped it: one sidecar alone
// admitted 106% of a sliding-window quota every minute (issue 44).
func nodeConfig(r *rules.Rule, share, burst float64, part bool) (algo.Config, bool) {
	if !(share > 0) || math.IsInf(share, 0) {
		return algo.Config{}, false
	}
	cfg := algo.Config{Algorithm: r.Algorithm, Period: r.Period}
	if r.Cycle != nil {
		cfg.Calendar = r.Cycle.Calendar() // fixed_window only: no stretching below
	}
	switch r.Algorithm {
	case algo.GCRA, algo.TokenBucket:
		k := 1.0
		if share < 1000 {
			k = math.Ceil(1000 / share)
		}
		if float64(r.Period)*k > float64(algo.MaxPeriod) {
			k = math.Max(1, math.Floor(float64(algo.MaxPeriod)/float64(r.Period)))
		}
		cfg.Limit = max(int64(math.Round(share*k)), 1)
		cfg.Period = time.Duration(float64(r.Period) * k)
		// GCRA admits 1+Burst at one instant, the bucket Burst.
		perTick := share * float64(tick) / float64(r.Period)
		if r.Algorithm == algo.GCRA {
			cfg.Burst = int64(math.Ceil(math.Max(burst, perTick-1)))
		} else {
			cfg.Burst = int64(math.Ceil(math.Max(math.Max(burst, perTick), 1)))
		}
		// Guard against shares too fine for a nanosecond clock.
		if cfg.Period/time.Duration(cfg.Limit) == 0 {
			cfg.Limit = int64(cfg.Period)
		}
		// And against shares too coarse for a century: algo refills a
		// bucket, or drains GCRA's burst, within algo.MaxPeriod. A share
		// under one unit a century (a lease of 1.42e-14/s: the hand-over
		// guard's room left as a float residue, "nothing more for now")
		// is one unit a century, and its burst what that refills.
		if most := int64(algo.MaxPeriod / (cfg.Period / time.Duration(cfg.Limit))); r.Algorithm == algo.GCRA {
			cfg.Burst = min(cfg.Burst, most-1)
		} else {
			cfg.Burst = min(cfg.Burst, most)
		}
	default:
		cfg.Limit = max(int64(math.Round(share)), 1)
		if part && r.Algorithm == algo.SlidingWindow && share*r.Tol() >= 1 {
			cfg.Slack = 1
		}
	}
	return cfg, true
}

// stripeChunk is how many units each of a global rule's stripes takes from
// the node's total at once (algo.Striped): as many as keep everything the
// stripes hold within the rule's tolerance of what the total admits at
// once, and at most 64 (one call to the total in 64 requests is already
// too few to contend). Stripes can admit what they hold on top of a full
// total, so a rule that tolerates no overshoot is not striped; nor is a
// total too small for a chunk of 2 per stripe, which is exact.
func stripeChunk(r *rules.Rule, cfg algo.Config, stripes int) int64 {
	if stripes < 2 || r.Algorithm.Windowed() || !(r.Tol() > 0) {
		return 0
	}
	capacity := cfg.Burst // the token bucket's capacity
	if r.Algorithm == algo.GCRA {
		capacity = 1 + cfg.Burst
	}
	return min(int64(r.Tol()*float64(capacity)/float64(stripes)), 64)
}

// shareOf is a node's share of an effective limit when it holds no lease:
// the region's part, divided evenly among the nodes. A rule that is not
// coordinated (a local rule, or any rule of a standalone agent) gives
// every node the whole of it.
func (rs *ruleState) shareOf(limit int64, region string, nodes int) float64 {
	if !rs.coordinated {
		nodes = 1
	}
	return lease.UnleasedShare(rs.rule.RegionLimit(limit, region), nodes)
}

// newLimitStore makes the store for one effective limit.
//
// A plan's or a tenant's own anchor (rules.Anchor) makes the store count
// the rule's calendar period from it: the store enforces the rule so
// anchored (ruleOf), and reports its keys' windows by it.
func (rs *ruleState) newLimitStore(limit int64, anchor rules.Anchor, region string, nodes int, opts algo.KeyedOptions) (*limitStore, error) {
	r := rs.rule.Anchored(anchor)
	st, err := rs.newLimitStoreOf(r, limit, region, nodes, opts)
	if st != nil && r != &rs.rule {
		st.rule = r
	}
	return st, err
}

// newLimitStoreOf makes the store for one effective limit of r: the rule,
// or the rule as a call limit changes it.
func (rs *ruleState) newLimitStoreOf(r *rules.Rule, limit int64, region string, nodes int, opts algo.KeyedOptions) (*limitStore, error) {
	st := &limitStore{limit: limit, share: rs.shareOf(limit, region, nodes)}
	cfg, _ := nodeConfig(r, st.share, r.BurstFor(float64(limit))*st.share/float64(limit), rs.coordinated)
	var err error
	if r.Scope == rules.Global {
		var lim *algo.Limiter
		if lim, err = algo.New(cfg); err == nil {
			st.single = algo.NewStriped(lim, 4*runtime.GOMAXPROCS(0), stripeChunk(r, cfg, 4*runtime.GOMAXPROCS(0)))
		}
	} else {
		st.keyed, err = algo.NewKeyed(cfg, opts)
	}
	return st, err
}

// ruleOf is the rule the store enforces: rs's, a call limit's, or rs's
// on a plan's or tenant's calendar anchor.
func (st *limitStore) ruleOf(rs *ruleState) *rules.Rule {
	if st.rule != nil {
		return st.rule
	}
	return &rs.rule
}

// setShare changes the node's unleased share of a coordinated rule,
// keeping every key's state. A share the algorithm refuses is recorded
// (ruleData.refused) and not taken: the store keeps enforcing, and
// reporting, the share it had.
func (st *limitStore) setShare(rs *ruleState, share float64, now time.Time) {
	r := st.ruleOf(rs)
	st.mu.Lock()
	defer st.mu.Unlock()
	if share == st.share {
		return
	}
	cfg, ok := nodeConfig(r, share, r.BurstFor(float64(st.limit))*share/float64(st.limit), true)
	if !ok {
		return
	}
	if st.single != nil {
		if err := st.single.Reconfigure(cfg, now); err != nil {
			rs.refused(fmt.Sprintf("the node's share %g", share), err)
			return
		}
		st.single.SetChunk(stripeChunk(r, cfg, st.single.Stripes()))
		for i := range st.closed {
			st.closed[i].Store(0) // worked out at the old share
		}
	} else if err := st.keyed.Reconfigure(cfg, now); err != nil {
		rs.refused(fmt.Sprintf("the node's share %g", share), err)
		return
	}
	st.share = share
}

// store returns the store for a request's call limit, or its tenant and
// plan.
func (rs *ruleState) store(req *Request) *limitStore {
	if req.lst != nil {
		return req.lst
	}
	if to := rs.overrides.get(req.Tenant); to != nil && (to.o.Limit > 0 || to.reset || !to.o.Cycle.IsZero()) {
		if st := rs.overrideStore(to, req); st != nil {
			return st
		}
	}
	return rs.baseStore(req)
}

// baseStore is the store of a request's tenant and plan by the rule set
// alone: the rule file's tenants, then plans, then the rule's own.
func (rs *ruleState) baseStore(req *Request) *limitStore {
	if rs.byTenant != nil {
		if st := rs.byTenant[req.Tenant]; st != nil {
			return st
		}
	}
	if rs.byPlan != nil {
		if st := rs.byPlan[req.Plan]; st != nil {
			return st
		}
	}
	return rs.def
}

// stores returns every store of the rule.
func (rs *ruleState) stores() []*limitStore {
	out := []*limitStore{rs.def}
	for _, st := range rs.byPlan {
		out = append(out, st)
	}
	for _, st := range rs.byTenant {
		out = append(out, st)
	}
	out = append(out, rs.calls.made()...)
	return append(out, rs.overrides.made()...)
}

// coversAll reports whether the rule covers every request Check decides:
// it has no match conditions and is not an Envoy descriptor rule.
func (rs *ruleState) coversAll() bool {
	m := &rs.rule.Match
	return !rs.descriptor && len(m.Tenants) == 0 && len(m.Plans) == 0 && len(m.Routes) == 0
}

// matches reports whether the rule covers the request. Descriptor rules
// are decided by CheckDescriptors only.
func (rs *ruleState) matches(req *Request) bool {
	return rs.every || !rs.descriptor && rs.rule.Matches(req.Tenant, req.Plan, req.Route)
}

// result is one rule's decision. It has four fields, not algo.Decision's
// five, because a struct of at most four fields stays in registers on its
// way up the calls, while a larger one is copied through memory at every
// level: on the request path that copying cost more than the algorithms.
// A request was admitted exactly when retry is zero (a refusal always says
// when to come back, or is negative for never).
type result struct {
	remaining, limit int64
	retry, reset     time.Duration
}

// tighter reports whether r leaves a smaller share of its limit than o:
// the rule whose figures a Decision carries. The shares are compared as
// cross products in 128 bits, exact and free of the division that cost a
// check more than any other arithmetic in it.
func (r *result) tighter(o *result) bool {
	a, b, c, d := r.remaining, max(r.limit, 1), o.remaining, max(o.limit, 1)
	if a < 0 || c < 0 {
		return float64(a)/float64(b) < float64(c)/float64(d)
	}
	h1, l1 := bits.Mul64(uint64(a), uint64(d))
	h2, l2 := bits.Mul64(uint64(c), uint64(b))
	return h1 < h2 || h1 == h2 && l1 < l2
}

func (r result) allowed() bool { return r.retry == 0 }

// fromAlgo converts an algo decision.
func fromAlgo(d *algo.Decision) result {
	r := result{d.Remaining, d.Limit, d.RetryAfter, d.ResetAfter}
	if !d.Allowed && r.retry == 0 {
		r.retry = time.Nanosecond
	}
	return r
}

// refused is a refusal with nothing else known.
func refused(retry time.Duration) result { return result{limit: 1, retry: retry} }

// reqHashes caches a request's attribute hashes, so each attribute is
// hashed at most once per Check however many rules use it.
type reqHashes struct {
	done uint8
	h    [5]algo.Hash // tenant, user, route, ip, descriptor
}

func attrIndex(a rules.Attr) int {
	switch a {
	case rules.AttrUser:
		return 1
	case rules.AttrRoute:
		return 2
	case rules.AttrIP:
		return 3
	case rules.AttrDescriptor:
		return 4
	}
	return 0
}

func (rh *reqHashes) get(a *Agent, req *Request, attr rules.Attr) algo.Hash {
	i := attrIndex(attr)
	if rh.done&(1<<i) == 0 {
		if i == 4 {
			rh.h[i] = a.descriptorHash(req.desc.Entries)
		} else {
			rh.h[i] = a.hasher.String(req.attrValue(attr))
		}
		rh.done |= 1 << i
	}
	return rh.h[i]
}

// tenantKeyed reports whether the rule's key is the tenant alone and it is
// coordinated per key: then the usage counters count each key exactly.
func (rs *ruleState) tenantKeyed() bool {
	return rs.coordinated && rs.fair == nil && len(rs.attrs) == 1 && rs.attrs[0] == rules.AttrTenant
}

// keyHash is the hash of the request's key under this rule: its
// attributes' hashes, mixed in order.
func (rs *ruleState) keyHash(a *Agent, rh *reqHashes, req *Request) algo.Hash {
	h := rh.get(a, req, rs.attrs[0])
	for _, attr := range rs.attrs[1:] {
		h = h.Then(rh.get(a, req, attr))
	}
	return req.keySalt(h)
}

// decide is the rule's decision of a request of cost, by o: spent, peeked
// at, or given back. The fail mode decides first (a peek or a give-back
// counts no fail-mode decision; a give-back is never refused), then a
// global rule's classes and total (fairState.decide), then the key's own
// limiter if it is hot (hotKey.decide), and otherwise the key's unleased
// share in the store. A spent request of a key that has used half its
// share, or been refused, asks for a lease.
func (rs *ruleState) decide(a *Agent, req *Request, rh *reqHashes, now time.Time, cost int64, o op) result {
	if rs.fallback.Load() && o < opGiveBack {
		if o == opSpend {
			rs.fellBack.Add(1)
		}
		if rs.mode == lease.FailClosed {
			return refused(a.interval())
		}
	}
	if rs.fair != nil {
		return rs.fair.decide(a, rs, rs.store(req), req, rh, now, cost, o)
	}
	h := rs.keyHash(a, rh, req)
	hm := *rs.hot.Load()
	if len(hm) > 0 {
		if hk := hm[h]; hk != nil && hk.ready.Load() {
			return hk.decide(a, now, cost, o) // a leased key needs no store
		}
	}
	st := rs.store(req)
	var r result
	for try := 0; ; try++ {
		var handedOver bool
		switch o {
		case opSpend:
			d := st.keyed.AllowHashAt(h, now, cost)
			r, handedOver = fromAlgo(&d), d.HandedOver
		case opPeek:
			d := st.keyed.PeekHashAt(h, now, cost)
			r, handedOver = fromAlgo(&d), d.HandedOver
		default:
			st.keyed.ReturnHashAt(h, now, cost)
			return result{}
		}
		if !handedOver || try == 3 {
			break
		}
		// Made hot since hm was read (promote): the hot key decides. Or
		// given back to the store since (demote): ask the store again.
		if hk := (*rs.hot.Load())[h]; hk != nil && hk.ready.Load() {
			return hk.decide(a, now, cost, o)
		}
	}
	// A key that has used half its unleased share, or been refused, may
	// need more than an even share: ask for a lease in the background. A
	// process joining the fleet asks at once (see joinReports), while its
	// hot keys take up at most half of MaxHotKeys: a gateway restarted
	// under a flood of keys does not fill its hot set with keys it saw
	// once.
	if rs.coordinated && o == opSpend && (!r.allowed() || 2*r.remaining < r.limit || a.joining.Load() && len(hm) < a.cfg.MaxHotKeys/2) && !rs.pending.seen(h) {
		var buf keyBuf
		rs.pending.add(h, encodeKey(&buf, rs.attrs, req), req, 0)
		a.askEarly() // to make it hot soon
	}
	return r
}

// hidden counts, on a leased key, a request an earlier rule refused as
// demand this rule denied (compiled.nested). A key with no lease counts
// nothing: it enforces its unleased share, which no demand changes.
func (rs *ruleState) hidden(a *Agent, req *Request, rh *reqHashes, cost int64) {
	if hk := (*rs.hot.Load())[rs.keyHash(a, rh, req)]; hk != nil && hk.ready.Load() {
		hk.denied.Add(cost)
	}
}
