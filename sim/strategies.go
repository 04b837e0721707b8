package sim

import (
	"math"
	"strconv"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/rules"
)

// strategy is one way a fleet can enforce a global limit. Every strategy
// sees the same requests at the same virtual times.
type strategy interface {
	// decide admits or refuses a request that reached node at time at.
	decide(at time.Duration, node, tenant int) bool
	// advance does the strategy's background work up to at: reports,
	// syncs, allocation rounds.
	advance(at time.Duration)
	// fleet tells the strategy the fleet now has n nodes.
	fleet(at time.Duration, n int)
	// failover elects a new coordinator leader; skew sets a node's clock
	// off. Only strategies with a coordinator or per-node clocks care.
	failover(at time.Duration)
	skew(node int, by time.Duration)
	// restart replaces a node's process: whatever it held in memory is
	// gone.
	restart(at time.Duration, node int)
	// messages counts messages off the request path; trips, calls on it.
	messages() int64
	trips() int64
	// shares is each node's share of tenant 0's limit now, for plots.
	shares(at time.Duration) []float64
	close()
}

// env is the world every strategy lives in: the virtual clock's origin,
// and who can reach the coordinator (or the store) when.
type env struct {
	s       *Scenario
	rule    rules.Rule
	origin  time.Time
	outages [][2]time.Duration
	parts   []partition
	// isolated are the spans regions' clusters cannot reach the parent.
	isolated []isolation
	// tenants and plans name each tenant and its plan, made once so the
	// request loop allocates nothing.
	tenants, plans []string
}

type isolation struct {
	from, to time.Duration
	region   int
}

// parentReachable reports whether a region's cluster can reach the
// parent at a time.
func (e *env) parentReachable(at time.Duration, region int) bool {
	for _, p := range e.isolated {
		if at >= p.from && at < p.to && region == p.region {
			return false
		}
	}
	return true
}

// regionOf is the region node is in: 0 without regions.
func (e *env) regionOf(node int) int {
	if e.s.Regions == nil {
		return 0
	}
	return node % e.s.Regions.Count
}

type partition struct {
	from, to time.Duration
	nodes    int // the first nodes of the fleet
}

func newEnv(s *Scenario) (*env, error) {
	r, err := s.rule()
	if err != nil {
		return nil, err
	}
	e := &env{s: s, rule: r, origin: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e.tenants, e.plans = make([]string, s.Tenants.Count), make([]string, s.Tenants.Count)
	for i := range e.tenants {
		e.tenants[i], e.plans[i] = "tenant-"+strconv.Itoa(i), planOf(i)
	}
	for _, ev := range s.Events {
		switch {
		case ev.Outage > 0:
			e.outages = append(e.outages, [2]time.Duration{ev.At, ev.At + ev.Outage})
		case ev.Partition != nil:
			e.parts = append(e.parts, partition{ev.At, ev.At + ev.Partition.For, ev.Partition.Nodes})
		case ev.Isolate != nil:
			e.isolated = append(e.isolated, isolation{ev.At, ev.At + ev.Isolate.For, ev.Isolate.Region})
		}
	}
	return e, nil
}

// reachable reports whether a node can reach the coordinator at a time.
func (e *env) reachable(at time.Duration, node int) bool {
	for _, o := range e.outages {
		if at >= o[0] && at < o[1] {
			return false
		}
	}
	for _, p := range e.parts {
		if at >= p.from && at < p.to && node < p.nodes {
			return false
		}
	}
	return true
}

func (e *env) time(at time.Duration) time.Time { return e.origin.Add(at) }

// keyOf is the limit's key for a tenant: one key for a global limit.
func (e *env) keyOf(tenant int) string {
	if e.rule.Scope == rules.Global {
		return "global"
	}
	return e.tenants[tenant]
}

// shareConfig is an algo configuration for a share of the rule's limit
// per period, kept exact for rate algorithms by stretching the period.
func shareConfig(r *rules.Rule, share float64) algo.Config {
	cfg := algo.Config{Algorithm: r.Algorithm, Limit: max(int64(math.Round(share)), 1), Period: r.Period}
	burst := r.BurstFor(share)
	switch r.Algorithm {
	case algo.GCRA, algo.TokenBucket:
		k := math.Max(1, math.Ceil(1000/share))
		cfg.Limit = max(int64(math.Round(share*k)), 1)
		cfg.Period = time.Duration(float64(r.Period) * k)
		if r.Algorithm == algo.TokenBucket {
			burst = math.Max(burst, 1)
		}
		cfg.Burst = int64(math.Ceil(burst))
	}
	return cfg
}

// central is the design's default: one shared counter, one store round
// trip per request, exact. A node that cannot reach the store falls back
// to an even share of its own.
type central struct {
	e        *env
	store    *algo.Keyed
	local    []*algo.Keyed
	requests int64
}

func newCentral(e *env) (*central, error) {
	st, err := algo.NewKeyed(shareConfig(&e.rule, float64(e.rule.Limit)), algo.KeyedOptions{MaxKeys: 1 << 20})
	if err != nil {
		return nil, err
	}
	c := &central{e: e, store: st}
	c.fleet(0, e.s.Nodes)
	return c, nil
}

func (c *central) decide(at time.Duration, node, tenant int) bool {
	now := c.e.time(at)
	if !c.e.reachable(at, node) {
		return c.local[node].AllowAt(c.e.keyOf(tenant), now, 1).Allowed
	}
	c.requests++
	return c.store.AllowAt(c.e.keyOf(tenant), now, 1).Allowed
}

func (c *central) advance(time.Duration) {}

func (c *central) fleet(at time.Duration, n int) {
	c.local = evenStores(c.e, at, n, c.local)
}

func (c *central) failover(time.Duration) {}

// restart gives the node a fresh fallback store; the central store, which
// decides while it is reachable, keeps its state.
func (c *central) restart(_ time.Duration, node int) { c.local[node] = freshStore(c.local[node]) }
func (c *central) skew(int, time.Duration)           {}
func (c *central) messages() int64                   { return 0 }
func (c *central) trips() int64                      { return c.requests }
func (c *central) shares(time.Duration) []float64 {
	return []float64{float64(c.e.rule.Limit)}
}
func (c *central) close() {}

// evenStores gives each of n nodes a store enforcing limit ÷ n, keeping
// the stores (and their state) of nodes that stay.
func evenStores(e *env, at time.Duration, n int, old []*algo.Keyed) []*algo.Keyed {
	cfg := shareConfig(&e.rule, float64(e.rule.Limit)/float64(n))
	out := make([]*algo.Keyed, n)
	for i := range out {
		if i < len(old) && old[i] != nil {
			out[i] = old[i]
			_ = out[i].Reconfigure(cfg, e.time(at))
			continue
		}
		out[i], _ = algo.NewKeyed(cfg, algo.KeyedOptions{MaxKeys: 1 << 20})
	}
	return out
}

// freshStore is a new store enforcing what old does, with none of its
// state: a restarted process's.
func freshStore(old *algo.Keyed) *algo.Keyed {
	s, _ := algo.NewKeyed(old.Config(), old.Options())
	return s
}

// evenSplit gives every node limit ÷ nodes, whatever the demand: what a
// fleet gets with no coordination at all.
type evenSplit struct {
	e      *env
	stores []*algo.Keyed
}

func newEvenSplit(e *env) *evenSplit {
	s := &evenSplit{e: e}
	s.fleet(0, e.s.Nodes)
	return s
}

func (s *evenSplit) decide(at time.Duration, node, tenant int) bool {
	return s.stores[node].AllowAt(s.e.keyOf(tenant), s.e.time(at), 1).Allowed
}
func (s *evenSplit) advance(time.Duration)             {}
func (s *evenSplit) fleet(at time.Duration, n int)     { s.stores = evenStores(s.e, at, n, s.stores) }
func (s *evenSplit) failover(time.Duration)            {}
func (s *evenSplit) restart(_ time.Duration, node int) { s.stores[node] = freshStore(s.stores[node]) }
func (s *evenSplit) skew(int, time.Duration)           {}
func (s *evenSplit) messages() int64                   { return 0 }
func (s *evenSplit) trips() int64                      { return 0 }
func (s *evenSplit) close()                            {}
func (s *evenSplit) shares(time.Duration) []float64 {
	out := make([]float64, len(s.stores))
	for i := range out {
		out[i] = float64(s.e.rule.Limit) / float64(len(s.stores))
	}
	return out
}

// asyncGlobal is Gubernator's GLOBAL mode: each node decides from its own
// cached count of the key's window plus the hits it has not yet sent; every
// sync interval it sends its hits to the key's owner, which adds them up
// and broadcasts the count back. Overshoot is bounded only by nodes × hits
// per sync.
type asyncGlobal struct {
	e        *env
	sync     time.Duration
	nextSync time.Duration
	window   int64           // current window index
	hits     []map[int]int64 // per node, per tenant: not yet sent
	cache    []map[int]int64 // per node, per tenant: the owner's last broadcast
	owned    map[int]int64   // per tenant: the owner's count
	msgs     int64
}

// gubernatorSync is Gubernator's default GlobalSyncWait.
const gubernatorSync = 100 * time.Millisecond

func newAsyncGlobal(e *env) *asyncGlobal {
	g := &asyncGlobal{e: e, sync: gubernatorSync, nextSync: gubernatorSync, owned: map[int]int64{}}
	g.fleet(0, e.s.Nodes)
	return g
}

func (g *asyncGlobal) roll(at time.Duration) {
	if w := int64(at / g.e.rule.Period); w != g.window {
		g.window = w
		clear(g.owned)
		for i := range g.cache {
			clear(g.cache[i])
			clear(g.hits[i])
		}
	}
}

// decide runs after advance(at), which has rolled the window.
func (g *asyncGlobal) decide(at time.Duration, node, tenant int) bool {
	if g.e.rule.Scope == rules.Global {
		tenant = 0
	}
	if g.cache[node][tenant]+g.hits[node][tenant] >= g.e.rule.Limit {
		return false
	}
	g.hits[node][tenant]++
	return true
}

func (g *asyncGlobal) advance(at time.Duration) {
	g.roll(at)
	for g.nextSync <= at {
		t := g.nextSync
		g.nextSync += g.sync
		touched := map[int]bool{}
		up := make([]bool, len(g.hits))
		for node := range g.hits {
			if up[node] = g.e.reachable(t, node); !up[node] {
				continue // a partitioned peer keeps its hits and its stale cache
			}
			sent := false
			for tenant, h := range g.hits[node] {
				g.owned[tenant] += h
				touched[tenant] = true
				sent = true
			}
			clear(g.hits[node])
			if sent {
				g.msgs++
			}
		}
		for tenant := range touched {
			for node := range g.cache {
				if up[node] {
					g.cache[node][tenant] = g.owned[tenant]
				}
			}
			g.msgs += int64(len(g.cache)) // one broadcast per peer
		}
	}
}

func (g *asyncGlobal) fleet(_ time.Duration, n int) {
	for len(g.hits) < n {
		g.hits = append(g.hits, map[int]int64{})
		g.cache = append(g.cache, map[int]int64{})
	}
	g.hits, g.cache = g.hits[:n], g.cache[:n]
}

func (g *asyncGlobal) failover(time.Duration) {}

// restart loses the node's unsent hits and its cached counts; the owner's
// counts, on another node, stay.
func (g *asyncGlobal) restart(_ time.Duration, node int) {
	g.hits[node], g.cache[node] = map[int]int64{}, map[int]int64{}
	// A tenant's counts live on its owner (tenant mod nodes); a restarted
	// owner starts them afresh.
	for tenant := range g.owned {
		if tenant%len(g.hits) == node {
			delete(g.owned, tenant)
		}
	}
}
func (g *asyncGlobal) skew(int, time.Duration) {}
func (g *asyncGlobal) messages() int64         { return g.msgs }
func (g *asyncGlobal) trips() int64            { return 0 }
func (g *asyncGlobal) close()                  {}
func (g *asyncGlobal) shares(time.Duration) []float64 {
	return []float64{float64(g.e.rule.Limit)}
}
