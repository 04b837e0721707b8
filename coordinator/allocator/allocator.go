package allocator

import (
	"hash/maphash"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// Allocator is the leader's soft state: every node's smoothed demand and
// held lease for every key it reported, and the grants of the latest
// allocation. None of it is replicated; a new leader rebuilds it from the
// next round of reports, in learning mode for one lease period (see
// package lease).
//
// Keys are spread over independently locked shards, so that reports for
// different keys, and allocation rounds, proceed in parallel. An Allocator
// is safe for concurrent use.
type Allocator struct {
	est    lease.Estimator
	region string
	// global is set on a parent cluster: its nodes are regions, and it
	// divides every rule's whole limit among them (see tier.go).
	global bool
	// parent holds a region cluster's leases from its parent; nil when
	// the cluster leases from none and divides the static fractions.
	parent *parentLeases
	// interval and ttl are the cluster's report interval and lease TTL,
	// in ns (see SetTiming).
	interval atomic.Int64
	ttl      atomic.Int64
	seed     maphash.Seed

	mu       sync.Mutex // guards the fields below and the node registry
	rules    map[string]*rules.Rule
	epoch    uint64
	learnEnd int64 // ns; learning mode until then
	// fleet is, while learning, the fewest nodes NodeCount answers: the
	// nodes whose usage the replicated state shows in the last two lease
	// periods. A new leader has heard from none of them yet, and agents
	// divide their unleased shares by the count it answers.
	fleet int
	nodes map[string]*nodeInfo
	next  int32 // index of the next new node; indexes are not reused
	// counted is the fleet as NodeCount last counted it; lastFull is
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
	// (AwaitRound). nil until a report asks.
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
	// sweepAt is when the shard's next full pass is due (ns; 0: not
	// placed yet, see sweepDue): every pool of the shard divided, once a
	// lease period, each shard at its own phase of the period.
	sweepAt int64
}

type poolKey struct{ rule, key string }

type nodeInfo struct {
	index    int32
	lastSeen int64
	// cut is when the node's last regular report was cut (its sent time,
	// on the coordinators' clock, never after it was folded): what it
	// spent of a key until then, it reported if the key was busy.
	cut    int64
	region string // the region it reported from (a parent's nodes are regions)
	// groupSeen is, on a parent, when each shard group of the region
	// last reported (ns); "" for a region never split.
	groupSeen map[string]int64
}

// pool is one key of one rule: the allowance being divided.
type pool struct {
	key  poolKey // its key in its shard's map
	rule *rules.Rule
	// limit is what the pool divides, in the rule's units per period:
	// the region's part of ruleLimit (see allocator.poolLimit), the
	// rule's limit for the key's tenant and plan (its cap, with overage:
	// rules.Rule.Cap), which are kept to report the key to a parent.
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
	// folded is when a report last folded a claim into the pool (ns):
	// a pool folded within a lease period has a claim that has not
	// expired, which spares lapsed its walk over every claim.
	folded int64
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

// Config says what an Allocator divides.
type Config struct {
	// Region is the cluster's region: a rule divided among regions is
	// divided here by its part for this region.
	Region string
	// Global makes the allocator a parent cluster's: its nodes are
	// regions, and it divides every rule's whole limit among them (see
	// tier.go).
	Global bool
	// Parent makes it a region cluster's that leases the rules divided
	// among regions from a parent (RegionDemand, ApplyParent), rather
	// than dividing their static fractions.
	Parent bool
	// ReportInterval and LeaseTTL are what it divides and grants by until
	// SetTiming sets the cluster's.
	ReportInterval, LeaseTTL time.Duration
}

// New returns an allocator that leads no term yet (see Lead).
func New(cfg Config) *Allocator {
	a := &Allocator{
		est:    lease.DefaultEstimator(),
		region: cfg.Region,
		global: cfg.Global,
		seed:   maphash.MakeSeed(),
		rules:  map[string]*rules.Rule{},
		nodes:  map[string]*nodeInfo{},
	}
	if cfg.Parent {
		a.parent = &parentLeases{m: map[poolKey]*parentLease{}}
	}
	a.SetTiming(cfg.ReportInterval, cfg.LeaseTTL)
	for i := range a.shards {
		a.shards[i].pools = map[poolKey]*pool{}
	}
	return a
}

// SetTiming sets the report interval and lease TTL the allocator divides
// and grants by: the cluster's replicated settings, set by a new leader
// before Lead.
func (a *Allocator) SetTiming(interval, ttl time.Duration) {
	a.interval.Store(int64(interval))
	a.ttl.Store(int64(ttl))
}

// LeaseTTL is how long the leases granted hold.
func (a *Allocator) LeaseTTL() time.Duration { return time.Duration(a.ttl.Load()) }

// Lead resets the allocator for a new term of leadership: it forgets all
// soft state and learns for one lease period. A cluster's first leader
// (epoch 1) has no predecessor whose grants it could double, and does not
// learn.
func (a *Allocator) Lead(epoch uint64, now int64, fleet int) {
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
		sh.pools, sh.due, sh.sweepAt = map[poolKey]*pool{}, nil, 0
		sh.mu.Unlock()
	}
	a.Release()
}

// SetRules installs a new rule set. Pools of rules that changed are
// dropped and rebuilt from the next reports; the others keep their state.
// A rule whose regions leave out this coordinator's region is skipped: it
// has no allowance here to divide, so its keys get no pool and no lease.
func (a *Allocator) SetRules(set *rules.Set) {
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

func (a *Allocator) shard(k poolKey) *allocShard {
	var h maphash.Hash
	h.SetSeed(a.seed)
	h.WriteString(k.rule)
	h.WriteByte(0)
	h.WriteString(k.key)
	return &a.shards[h.Sum64()%allocShards]
}

// NodeCount is the number of nodes heard from within two lease periods,
// and while learning at least the fleet the replicated state knows: a new
// leader answering only the nodes heard so far would have the first
// reporters enforce limit ÷ 1, limit ÷ 2… on every unleased key.
func (a *Allocator) NodeCount(now int64) int { return a.tally(now).n }

// tally counts the fleet at now (see NodeCount) and finds the oldest of
// its nodes' last regular report cuts. Counting walks the node registry,
// so a tally is kept for a quarter of a report interval: every report's
// answer carries the count, and each young pool's division asks for both.
func (a *Allocator) tally(now int64) nodeTally {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.counted; c.valid && now >= c.at && now-c.at < a.interval.Load()/4 {
		return c
	}
	t := nodeTally{at: now, valid: true, oldestCut: now}
	for _, info := range a.nodes {
		if now-info.lastSeen < 2*a.ttl.Load() {
			t.n++
			t.oldestCut = min(t.oldestCut, info.cut)
		}
	}
	if now < a.learnEnd {
		t.n = max(t.n, a.fleet)
	}
	a.counted = t
	return t
}

// nodeTally is a count of the fleet, the oldest cut of its nodes' last
// regular reports, and when it was made.
type nodeTally struct {
	n         int
	oldestCut int64
	at        int64
	valid     bool
}

// keep records, at now, that a node's report was shed: its answer renewed
// the leases it holds for a lease period, so its claims count as seen now
// and hold what they hold until then (see allocatePool). A node this
// leader has not heard from in its term is not kept, and reports false:
// its leases are its predecessor's, which this leader has not counted, so
// its answer renews nothing. It runs under a.mu.
func (a *Allocator) keep(node string, now int64) bool {
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
func (a *Allocator) unkeep(node int32) {
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

// Shed records that a node's report was Shed at now, and reports whether
// its answer renews the leases it holds (keep).
func (a *Allocator) Shed(node string, now int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.keep(node, now)
}

// Term is the epoch of the leader's Term.
func (a *Allocator) Term() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.epoch
}

// Knows reports whether node has reported to this leader.
func (a *Allocator) Knows(node string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nodes[node] != nil
}

// leaveHold is how many report intervals a leaving node's holding stays
// counted: one for its replacement to report, one for the lease to reach
// it.
const leaveHold = 2

// Tick runs the allocation round due at now (see round); once a lease
// period it also forgets the nodes long silent.
func (a *Allocator) Tick(now int64) (active int) {
	a.mu.Lock()
	forget := now-a.lastFull >= a.ttl.Load()
	if forget {
		a.lastFull = now
	}
	a.mu.Unlock()
	active = a.round(now, false)
	if forget {
		a.forgetNodes(now)
	}
	return active
}

// round divides every pool marked since the last round, each once, and
// every pool of the shards whose full pass is due (or of all shards, with
// all): once a lease period every pool is divided, so that silent nodes'
// leases are reclaimed and empty pools dropped. Its cost is the claims of
// the pools it divides: the entries reported since the last round,
// whatever the number of reports they came in, and a share of the full
// passes. The shards' full passes are spread over the lease period
// (sweepDue): a full pass over all of them at once took the leader's
// round from milliseconds to seconds once it held hundreds of thousands
// of keys, and every report waiting for that round waited as long. The
// reports waiting for it (AwaitRound) are released when it ends. It
// returns how many pools are held.
func (a *Allocator) round(now int64, all bool) (active int) {
	a.waitMu.Lock()
	done := a.waiting
	a.waiting = nil
	a.waitMu.Unlock()
	if done != nil {
		defer close(done)
	}
	learning := a.Learning(now)
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		full := a.sweepDue(sh, i, now) || all
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
	if all {
		a.forgetNodes(now)
	}
	return active
}

// sweepDue reports whether shard i's full pass is due at now, and if so
// sets the next one a lease period later. A shard is first placed at its
// own phase, the i+1'th sixteenth of the period from now, so that each
// round does at most a few shards' full passes however the round interval
// and the lease period compare, and no shard waits longer than a period
// for its first. Called with sh.mu held.
func (a *Allocator) sweepDue(sh *allocShard, i int, now int64) bool {
	ttl := max(a.ttl.Load(), 1)
	if sh.sweepAt == 0 {
		sh.sweepAt = now + ttl*int64(i+1)/allocShards
	}
	if now < sh.sweepAt {
		return false
	}
	// The next pass keeps the shard's phase; a leader stalled past it
	// starts the count again from now.
	if sh.sweepAt += ttl; sh.sweepAt <= now {
		sh.sweepAt = now + ttl
	}
	return true
}

// forgetNodes drops the nodes silent for ten lease periods: their claims
// are gone by then, and their indexes are not reused.
func (a *Allocator) forgetNodes(now int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, info := range a.nodes {
		if now-info.lastSeen > 10*a.ttl.Load() {
			delete(a.nodes, id)
		}
	}
}

// AwaitRound returns a channel closed when the next round to start has
// ended: one that starts after the call, and so divides what the caller
// folded before it.
func (a *Allocator) AwaitRound() <-chan struct{} {
	a.waitMu.Lock()
	defer a.waitMu.Unlock()
	if a.waiting == nil {
		a.waiting = make(chan struct{})
	}
	return a.waiting
}

// Release frees the reports waiting for a round that will not come: the
// leader's term ended. Each finds, on waking, that this member no longer
// leads.
func (a *Allocator) Release() {
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

// Learning reports whether the allocator is in Learning mode at now.
func (a *Allocator) Learning(now int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return now < a.learnEnd
}

// RuleCount is how many rules the allocator divides: the rule set's, less
// those with no allowance in this region.
func (a *Allocator) RuleCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.rules)
}

// KeptNodes is how many nodes were shed since they last reported, whose
// leases the shed answers renewed (Shed).
func (a *Allocator) KeptNodes() int {
	if kept := a.kept.Load(); kept != nil {
		return len(*kept)
	}
	return 0
}

// Awaited reports whether a report waits for the next round (AwaitRound).
func (a *Allocator) Awaited() bool {
	a.waitMu.Lock()
	defer a.waitMu.Unlock()
	return a.waiting != nil
}

// ActiveKeys returns how many pools are held.
func (a *Allocator) ActiveKeys() (active int) {
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		active += len(sh.pools)
		sh.mu.Unlock()
	}
	return active
}
