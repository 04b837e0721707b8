package coordinator

import (
	"hash/maphash"
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

	// overrides are the per-tenant overrides as of the state the leader
	// last read (overrideView.sync).
	overrides overrideView

	seq atomic.Uint64 // allocations, numbering grants
	// acquired are the slots this group took over from another by a move,
	// each learning until its end (shards.go); nil when none is.
	acquired atomic.Pointer[[]learningRange]

	shards [allocShards]allocShard
}

const allocShards = 16

type allocShard struct {
	mu      sync.Mutex
	pools   map[poolKey]*pool
	alloc   lease.Allocator
	claims  []lease.Claim
	classes []lease.Class
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
	dirty      bool
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
	a.mu.Unlock()
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		sh.pools = map[poolKey]*pool{}
		sh.mu.Unlock()
	}
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
			} else if pr, ok := p.own.ruleWith(nr); ok {
				p.rule = pr
			} else {
				delete(sh.pools, k) // cannot be: the rule is unchanged
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
// reporters enforce limit ÷ 1, limit ÷ 2… on every unleased key.
func (a *allocator) nodeCount(now int64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, info := range a.nodes {
		if now-info.lastSeen < 2*a.ttl.Load() {
			n++
		}
	}
	if now < a.learnEnd {
		n = max(n, a.fleet)
	}
	return n
}

// knows reports whether node has reported to this leader.
func (a *allocator) knows(node string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nodes[node] != nil
}

// report takes one node's demands and returns the leases it now holds for
// the keys it reported. A node leaving releases everything it held.
func (a *allocator) report(req *allotpb.ReportRequest, now int64) []*allotpb.Lease {
	node, inc, demands := req.GetNode(), req.GetIncarnation(), req.GetDemand()
	urgent, leaving := req.GetUrgent(), req.GetLeaving()
	interval := time.Duration(req.GetIntervalNano())
	a.mu.Lock()
	info := a.nodes[node]
	if info == nil {
		info = &nodeInfo{index: a.next}
		a.nodes[node] = info
		a.next++
	}
	info.lastSeen, info.region = now, req.GetRegion()
	if a.global {
		info.sawGroup(req.GetReporterGroup(), now, a.ttl.Load())
	}
	if leaving {
		info.lastSeen = 0 // out of the fleet's count at once; its claims go below
	}
	epoch, learning := a.epoch, now < a.learnEnd
	ruleMap := a.rules
	a.mu.Unlock()

	if interval <= 0 {
		interval = time.Duration(a.interval.Load())
	}
	// Three passes: fold every demand in, re-divide each pool that needs
	// it once, then answer each demand. A global rule's classes share one
	// pool; re-dividing it per class made a report of n classes cost n²
	// (4,882 classes timed reports out under make chaos).
	type dueKey struct {
		sh *allocShard
		p  *pool
	}
	due := map[dueKey]struct{}{}
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
		sh.mu.Lock()
		p := sh.pools[k]
		if p == nil || p.own != own {
			pr, ok := own.ruleWith(r)
			if !ok {
				sh.mu.Unlock()
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
		cl := c.claim(info.index)
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
			p.dirty = true
			// Demand that moved (beyond the estimator's noise band) is
			// re-divided now, not at the next round: the node hears of
			// its new share in this answer, an interval sooner.
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
			moved = true
		} else {
			cl.lastSeen = now
		}
		// A dirty pool holds room back (a decrease given up since its last
		// division, increases the hand-over guard deferred): divided now,
		// the node hears of its share in this answer, not a round later.
		if leaving || topUp || moved || cl.seq == 0 || dirty {
			due[dueKey{sh, p}] = struct{}{} // a leaving node's share is freed at once
		}
		sh.mu.Unlock()
	}
	for k := range due {
		k.sh.mu.Lock()
		a.allocatePool(k.sh, k.p, now, learning)
		k.sh.mu.Unlock()
	}
	var leases []*allotpb.Lease
	for _, d := range demands {
		r := ruleMap[d.GetRule()]
		if r == nil || r.Local || r.Unlimited || leaving {
			continue
		}
		if _, ok := demandLimit(r, d); !ok {
			continue
		}
		k := poolKey{d.GetRule(), d.GetKey()}
		sh := a.shard(k)
		sh.mu.Lock()
		// Found, never created: a pool a round or a rule change rebuilt
		// since the first pass gets this node's claim at its next report.
		if p := sh.pools[k]; p != nil {
			if c, cl := p.find(classKey{d.GetTenant(), d.GetPriority()}, r, info.index); cl != nil {
				if l := a.answer(p, c, cl, d, epoch, now); l != nil {
					leases = append(leases, l)
				}
			}
		}
		sh.mu.Unlock()
	}
	return leases
}

// leaveHold is how many report intervals a leaving node's holding stays
// counted: one for its replacement to report, one for the lease to reach
// it.
const leaveHold = 2

// round re-divides every pool that changed since the last round, and every
// pool at all once per lease period so that silent nodes' leases are
// reclaimed. It returns how many pools are held.
func (a *allocator) round(now int64, full bool) (active int) {
	learning := a.learning(now)
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for k, p := range sh.pools {
			if p.dirty || full {
				a.allocatePool(sh, p, now, learning)
			}
			if p.empty() {
				delete(sh.pools, k)
				continue
			}
			active++
		}
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
