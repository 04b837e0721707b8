package coordinator

import (
	"hash/maphash"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/lease/rules"
	allotpb "github.com/allot-io/allot/proto"
)

// allocator is the leader's soft state: every node's smoothed demand and
// held lease for every key it reported, and the grants of the latest
// allocation. None of it is replicated; a new leader rebuilds it from the
// next round of reports, in learning mode for one lease period (see
// package lease).
//
// Keys are spread over independently locked shards, so that reports for
// different keys, and allocation rounds, proceed in parallel.
type allocator struct {
	est    lease.Estimator
	region string
	// global is set on a parent cluster: its nodes are regions, and it
	// divides every rule's whole limit among them (see tier.go).
	global bool
	// parent holds a region cluster's leases from its parent; nil when
	// the cluster leases from none and divides the static fractions.
	parent *parentLeases
	// interval and ttl are the cluster's report interval and lease TTL,
	// in ns (see setTiming).
	interval atomic.Int64
	ttl      atomic.Int64
	seed     maphash.Seed

	mu       sync.Mutex // guards the fields below and the node registry
	rules    map[string]*rules.Rule
	epoch    uint64
	learnEnd int64 // ns; learning mode until then
	// fleet is, while learning, the fewest nodes nodeCount answers: the
	// nodes whose usage the replicated state shows in the last two lease
	// periods. A new leader has heard from none of them yet, and agents
	// divide their unleased shares by the count it answers.
	fleet int
	nodes map[string]*nodeInfo
	next  int32 // index of the next new node; indexes are not reused
	// counted is the fleet as nodeCount last counted it; lastFull is
	// when the last full round ran (ns).
	counted  nodeTally
	lastFull int64

	// overrides are the per-tenant overrides as of the state the leader
	// last read (overrideView.sync).
	overrides overrideView

	seq atomic.Uint64 // allocations, numbering grants
	// kept are the nodes shed since they last reported (their index, and
	// when): the shed answer renewed their leases, so their claims count
	// as seen then (keep). Copy-on-write: read by every division, written
	// only while the leader sheds.
	kept atomic.Pointer[map[int32]int64]
	// acquired are the slots this group took over from another by a move,
	// each learning until its end (shards.go); nil when none is.
	acquired atomic.Pointer[[]learningRange]

	shards [allocShards]allocShard

	// waiting is closed when the next round to start has ended: the
	// reports folded before it started wait on it for their answers
	// (awaitRound). nil until a report asks.
	waitMu  sync.Mutex
	waiting chan struct{}
}

const allocShards = 16

type allocShard struct {
	mu    sync.Mutex
	pools map[poolKey]*pool
	// due are the pools marked for the next round (markDirty), each once;
	// spare is the slice the last round took them in, reused.
	due, spare []*pool
	alloc      lease.Allocator
	claims     []lease.Claim
	classes    []lease.Class
}

type poolKey struct{ rule, key string }

type nodeInfo struct {
	index    int32
	lastSeen int64
	region   string // the region it reported from (a parent's nodes are regions)
	// groupSeen is, on a parent, when each shard group of the region
	// last reported (ns); "" for a region never split.
	groupSeen map[string]int64
}

// pool is one key of one rule: the allowance being divided.
type pool struct {
	rule *rules.Rule
	// limit is what the pool divides, in the rule's units per period:
	// the region's part of ruleLimit (see allocator.poolLimit), the
	// rule's limit for the key's tenant and plan, which are kept to
	// report the key to a parent.
	limit        float64
	ruleLimit    int64
	tenant, plan string
	// own is the key's own limit, set by the call (an Envoy descriptor's
	// limit, KeyDemand.limit): rule is then the rule with it
	// (rules.Rule.WithLimit), and ruleLimit it.
	own keyLimit
	// regionSeen is, on a parent, when each region last reported the key.
	regionSeen map[string]int64
	window     int64 // window algorithms: the current window's start, ns
	classes    []*class
	byClass    map[classKey]int // fair rules only
	// dirty marks a pool for the next round's division; queued says it
	// is in its shard's due list, and dropped that it left its shard's
	// map (an empty pool, a rule change, a new term) and is divided no
	// more.
	dirty, queued, dropped bool
	// contended is set when the last allocation found more demand than
	// the limit.
	contended bool
	// born is when the pool was created (ns). For its first report
	// interval every node with the key may still be spending its unleased
	// share unseen, having not reported it yet; see allocatePool.
	born int64
}

type classKey struct {
	tenant   string
	priority uint32
}

// class is one tenant at one priority of a fair rule, or the only class of
// any other rule.
type class struct {
	key    classKey
	weight float64
	claims []claim // sorted by node index
	// nodes are the claims' nodes, in the same order: a claim is found by
	// searching them, without touching the claims themselves.
	nodes []int32
}

func newAllocator(region string, interval, ttl time.Duration) *allocator {
	a := &allocator{
		est:    lease.DefaultEstimator(),
		region: region,
		seed:   maphash.MakeSeed(),
		rules:  map[string]*rules.Rule{},
		nodes:  map[string]*nodeInfo{},
	}
	a.setTiming(interval, ttl)
	for i := range a.shards {
		a.shards[i].pools = map[poolKey]*pool{}
	}
	return a
}

// setTiming sets the report interval and lease TTL the allocator divides
// and grants by: the cluster's replicated settings, set by a new leader
// before lead.
func (a *allocator) setTiming(interval, ttl time.Duration) {
	a.interval.Store(int64(interval))
	a.ttl.Store(int64(ttl))
}

// leaseTTL is how long the leases granted hold.
func (a *allocator) leaseTTL() time.Duration { return time.Duration(a.ttl.Load()) }

// lead resets the allocator for a new term of leadership: it forgets all
// soft state and learns for one lease period. A cluster's first leader
// (epoch 1) has no predecessor whose grants it could double, and does not
// learn.
func (a *allocator) lead(epoch uint64, now int64, fleet int) {
	a.mu.Lock()
	a.epoch, a.learnEnd, a.fleet = epoch, now+a.ttl.Load(), fleet
	if epoch <= 1 {
		a.learnEnd = now
	}
	a.seq.Store(0)
	a.nodes, a.next = map[string]*nodeInfo{}, 0
	a.counted, a.lastFull = nodeTally{}, now
	a.kept.Store(nil)
	a.mu.Unlock()
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for _, p := range sh.pools {
			p.dropped = true
		}
		sh.pools, sh.due = map[poolKey]*pool{}, nil
		sh.mu.Unlock()
	}
	a.release()
}

// setRules installs a new rule set. Pools of rules that changed are
// dropped and rebuilt from the next reports; the others keep their state.
// A rule whose regions leave out this coordinator's region is skipped: it
// has no allowance here to divide, so its keys get no pool and no lease.
func (a *allocator) setRules(set *rules.Set) {
	byName := make(map[string]*rules.Rule, set.Len())
	for i := range set.Rules() {
		r := set.Rules()[i]
		if !a.global && !appliesIn(&r, a.region) {
			continue
		}
		byName[r.Name] = &r
	}
	a.mu.Lock()
	old := a.rules
	a.rules = byName
	a.mu.Unlock()
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for k, p := range sh.pools {
			if nr := byName[k.rule]; nr == nil || old[k.rule] == nil || !rules.Equal(nr, old[k.rule]) {
				delete(sh.pools, k)
				p.dropped = true
			} else if pr, ok := p.own.ruleWith(nr); ok {
				p.rule = pr
			} else {
				delete(sh.pools, k) // cannot be: the rule is unchanged
				p.dropped = true
			}
		}
		sh.mu.Unlock()
	}
}

// appliesIn reports whether a rule has an allowance in a region: it
// divides none among regions, or names the region. (rules.Rule's
// RegionLimit gives a region it does not name a limit of 0; dividing that
// would lease every node nothing.)
func appliesIn(r *rules.Rule, region string) bool {
	if len(r.Regions) == 0 {
		return true
	}
	_, ok := r.Regions[region]
	return ok
}

func (a *allocator) shard(k poolKey) *allocShard {
	var h maphash.Hash
	h.SetSeed(a.seed)
	h.WriteString(k.rule)
	h.WriteByte(0)
	h.WriteString(k.key)
	return &a.shards[h.Sum64()%allocShards]
}

// nodeCount is the number of nodes heard from within two lease periods,
// and while learning at least the fleet the replicated state knows: a new
// leader answering only the nodes heard so far would have the first
// reporters enforce limit ÷ 1, limit ÷ 2… on every unleased key. Counting
// walks the node registry, so a count is kept for a quarter of a report
// interval: every report's answer carries it, and each pool's division
// may ask for it.
func (a *allocator) nodeCount(now int64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.counted; c.valid && now >= c.at && now-c.at < a.interval.Load()/4 {
		return c.n
	}
	n := 0
	for _, info := range a.nodes {
		if now-info.lastSeen < 2*a.ttl.Load() {
			n++
		}
	}
	if now < a.learnEnd {
		n = max(n, a.fleet)
	}
	a.counted = nodeTally{n: n, at: now, valid: true}
	return n
}

// nodeTally is a count of the fleet and when it was made.
type nodeTally struct {
	n     int
	at    int64
	valid bool
}

// keep records, at now, that a node's report was shed: its answer renewed
// the leases it holds for a lease period, so its claims count as seen now
// and hold what they hold until then (see allocatePool). A node this
// leader has not heard from in its term is not kept, and reports false:
// its leases are its predecessor's, which this leader has not counted, so
// its answer renews nothing. It runs under a.mu.
func (a *allocator) keep(node string, now int64) bool {
	info := a.nodes[node]
	if info == nil || info.lastSeen == 0 {
		return false
	}
	info.lastSeen = now
	old := a.kept.Load()
	next := make(map[int32]int64, 1)
	if old != nil {
		maps.Copy(next, *old)
	}
	next[info.index] = now
	a.kept.Store(&next)
	return true
}

// unkeep forgets that a node was shed: it reported. It runs under a.mu.
func (a *allocator) unkeep(node int32) {
	old := a.kept.Load()
	if old == nil {
		return
	}
	next := maps.Clone(*old)
	delete(next, node)
	if len(next) == 0 {
		next = nil
	}
	if next == nil {
		a.kept.Store(nil)
		return
	}
	a.kept.Store(&next)
}

// shed records that a node's report was shed at now, and reports whether
// its answer renews the leases it holds (keep).
func (a *allocator) shed(node string, now int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.keep(node, now)
}

// term is the epoch of the leader's term.
func (a *allocator) term() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.epoch
}

// knows reports whether node has reported to this leader.
func (a *allocator) knows(node string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nodes[node] != nil
}

// folded is a report taken into the allocator and waiting for its answer:
// at once when every pool it reported stands divided, or after the next
// round when one must be divided again first (stale).
type folded struct {
	req   *allotpb.ReportRequest
	node  int32
	epoch uint64
	// entries are where each demand was folded in, in the demand's order;
	// a demand that got no claim (no pool, a local rule) has none.
	entries []foldedEntry
	// stale is set when a pool the report touched must be divided again
	// before the node's lease in it is answered: its claim is new, its
	// demand moved, it asked for a top-up, or the pool holds room back
	// since its last division. The answer then waits for the next round.
	stale bool
}

// foldedEntry is where one demand went: its pool, class and claim (the
// claim's index, a hint: claims come and go until the answer).
type foldedEntry struct {
	sh *allocShard
	p  *pool
	c  *class
	i  int
	d  *allotpb.KeyDemand
}

// fold takes one node's report into the allocator: its demand, what it
// holds and what it spent, per key. No pool is divided here: a pool the
// report changed is marked for the next round, and the report is answered
// from the grants that round leaves (answer), so that however many nodes
// report between two rounds, each pool is divided once (a division is
// O(its claims), and dividing at every report made an interval's work
// grow like nodes² × tenants: issue 41). A node leaving releases
// everything it held, and is answered with no lease.
func (a *allocator) fold(req *allotpb.ReportRequest, now int64) *folded {
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
	if a.global {
		info.sawGroup(req.GetReporterGroup(), now, a.ttl.Load())
	}
	if leaving {
		info.lastSeen = 0 // out of the fleet's count at once; its claims go below
		a.counted.valid = false
	}
	f := &folded{req: req, node: info.index, epoch: a.epoch}
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
		if p == nil || p.own != own {
			pr, ok := own.ruleWith(r)
			if !ok {
				continue // the rule's algorithm cannot take it: no lease
			}
			if p == nil {
				p = &pool{rule: pr, born: now}
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
			p.ruleLimit, p.tenant, p.plan = r.LimitWith(o, overridden, d.GetTenant(), d.GetPlan()), d.GetTenant(), d.GetPlan()
		}
		p.limit = a.poolLimit(k, p.rule, p.ruleLimit, max(p.window, d.GetWindowUnixNano()), now)
		if a.global && !leaving {
			p.sawRegion(req.GetRegion(), req.GetReporterGroup(), now)
		}
		c := p.class(classKey{d.GetTenant(), d.GetPriority()}, r, r.WeightWith(o, overridden, d.GetTenant(), d.GetPlan()))
		cl, at := c.claim(info.index)
		if !leaving {
			f.entries = append(f.entries, foldedEntry{sh: sh, p: p, c: c, i: at, d: d})
		}
		// An early report asks for a top-up. When the pool is contended the
		// node is simply at its share, and the next round will do; when it
		// is not, the node's demand rose and spare capacity can follow it
		// now.
		// A claim coming back (left, or a new process under the node's
		// name) is always taken in: its last grant was its predecessor's.
		back := cl.left != 0 || (cl.reported && cl.inc != inc)
		topUp := urgent && (!p.contended || cl.est == 0 || back)
		moved, dirty := false, p.dirty
		seen := sighting{inc: inc, now: now, interval: interval, urgent: urgent, leaving: leaving, learning: learning}
		if !urgent || topUp {
			before := cl.est
			a.observe(p, cl, d, seen)
			sh.markDirty(p)
			// Demand that moved (beyond the estimator's noise band) is
			// divided at the next round, and this answer waits for it:
			// the node hears of its new share in this answer, not an
			// interval later.
			moved = math.Abs(cl.est-before) > a.est.Band*math.Max(before, cl.est)
			// In a window pool every grant includes what its node has
			// already spent in the window, which each report changes: a
			// grant from the last round predates it, and could be less
			// than the node has spent, leaving it stuck there for the
			// window while its share went unused.
			moved = moved || p.rule.Algorithm.Windowed()
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
		// A dirty pool holds room back (a decrease given up since its last
		// division, increases the hand-over guard deferred): divided at
		// the next round, the node hears of its share in this answer, not
		// a round later. A leaving node is answered nothing; its share is
		// freed at the next round.
		if !leaving && (topUp || moved || cl.seq == 0 || dirty) {
			f.stale = true
		}
	}
	return f
}

// answer returns the leases a folded report gets from the pools'
// divisions as they stand: only the leases that changed, as the node
// renews the others by the answer's renew_unix_nano. A leaving node gets
// none.
func (a *allocator) answer(f *folded, now int64) []*allotpb.Lease {
	var leases []*allotpb.Lease
	var held shardHold
	defer held.release()
	for _, e := range f.entries {
		held.take(e.sh)
		// A pool dropped since the report was folded (a rule change, a
		// new term) gets this node's claim at its next report.
		if !e.p.dropped {
			if cl := e.c.find(f.node, e.i); cl != nil {
				if l := a.leaseOf(e.p, e.c, cl, e.d, f.epoch, now); l != nil {
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
func (a *allocator) report(req *allotpb.ReportRequest, now int64) []*allotpb.Lease {
	f := a.fold(req, now)
	if f.stale {
		a.tick(now)
	}
	return a.answer(f, now)
}

// leaveHold is how many report intervals a leaving node's holding stays
// counted: one for its replacement to report, one for the lease to reach
// it.
const leaveHold = 2

// tick runs the allocation round due at now: a full one once per lease
// period (see round).
func (a *allocator) tick(now int64) (active int) {
	a.mu.Lock()
	full := now-a.lastFull >= a.ttl.Load()
	if full {
		a.lastFull = now
	}
	a.mu.Unlock()
	return a.round(now, full)
}

// round divides every pool marked since the last round, each once, and
// every pool at all in a full round (once per lease period, so that
// silent nodes' leases are reclaimed and empty pools dropped). Its cost is
// the claims of the pools it divides: the entries reported since the last
// round, whatever the number of reports they came in. The reports waiting
// for it (awaitRound) are released when it ends. It returns how many pools
// are held.
func (a *allocator) round(now int64, full bool) (active int) {
	a.waitMu.Lock()
	done := a.waiting
	a.waiting = nil
	a.waitMu.Unlock()
	if done != nil {
		defer close(done)
	}
	learning := a.learning(now)
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		due := sh.due
		sh.due = sh.spare[:0]
		if full {
			for k, p := range sh.pools {
				a.allocatePool(sh, p, now, learning)
				if p.empty() {
					delete(sh.pools, k)
					p.dropped = true
				}
			}
		}
		for _, p := range due {
			p.queued = false
			if !full && p.dirty && !p.dropped {
				a.allocatePool(sh, p, now, learning)
			}
		}
		// A pool the hand-over guard held room back in is divided again
		// at the next round.
		for _, p := range due {
			if p.dirty && !p.dropped {
				sh.markDirty(p)
			}
		}
		if full {
			for _, p := range sh.pools {
				if p.dirty {
					sh.markDirty(p)
				}
			}
		}
		clear(due)
		sh.spare = due[:0]
		active += len(sh.pools)
		sh.mu.Unlock()
	}
	if full {
		a.mu.Lock()
		for id, info := range a.nodes {
			if now-info.lastSeen > 10*a.ttl.Load() {
				delete(a.nodes, id) // its index is not reused; claims are gone by now
			}
		}
		a.mu.Unlock()
	}
	return active
}

// awaitRound returns a channel closed when the next round to start has
// ended: one that starts after the call, and so divides what the caller
// folded before it.
func (a *allocator) awaitRound() <-chan struct{} {
	a.waitMu.Lock()
	defer a.waitMu.Unlock()
	if a.waiting == nil {
		a.waiting = make(chan struct{})
	}
	return a.waiting
}

// release frees the reports waiting for a round that will not come: the
// leader's term ended. Each finds, on waking, that this member no longer
// leads.
func (a *allocator) release() {
	a.waitMu.Lock()
	defer a.waitMu.Unlock()
	if a.waiting != nil {
		close(a.waiting)
		a.waiting = nil
	}
}

// markDirty has the pool divided at the next round. It runs under the
// shard's lock.
func (sh *allocShard) markDirty(p *pool) {
	p.dirty = true
	if !p.queued {
		p.queued = true
		sh.due = append(sh.due, p)
	}
}

// learning reports whether the allocator is in learning mode at now.
func (a *allocator) learning(now int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return now < a.learnEnd
}

// activeKeys returns how many pools are held.
func (a *allocator) activeKeys() (active int) {
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		active += len(sh.pools)
		sh.mu.Unlock()
	}
	return active
}
