package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// request is one simulated request: when, whose, and which gateway it
// reached.
type request struct {
	at     time.Duration // since the start
	tenant int
	node   int
}

// traffic generates a scenario's requests as a Poisson process: the gaps
// between requests are exponential at the current rate, each request's
// tenant is drawn by the tenants' shares, and its gateway from the few its
// tenant is pinned to. It is deterministic for a seed.
type traffic struct {
	s      *Scenario
	rng    *rand.Rand
	share  []float64 // cumulative tenant shares
	nodes  [][]int   // per tenant: its gateways
	cum    [][]float64
	active int // gateways in the fleet
	next   time.Duration
}

func newTraffic(s *Scenario) *traffic {
	t := &traffic{s: s, rng: rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15)), active: s.Nodes}
	shares := make([]float64, s.Tenants.Count)
	for i := range shares {
		shares[i] = 1
		if s.Tenants.Zipf > 1 {
			shares[i] = 1 / math.Pow(float64(i+1), s.Tenants.Zipf)
		}
	}
	t.share = cumulative(shares)
	t.nodes = make([][]int, s.Tenants.Count)
	t.cum = make([][]float64, s.Tenants.Count)
	for i := range t.nodes {
		t.pin(i, nil)
	}
	t.next = t.gap(0)
	return t
}

func cumulative(w []float64) []float64 {
	out := make([]float64, len(w))
	sum := 0.0
	for i, x := range w {
		sum += x
		out[i] = sum
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// pin chooses a tenant's gateways: Sticky of the active ones (avoiding
// those in avoid when it can), weighted by Skew; or all of them.
func (t *traffic) pin(tenant int, avoid []int) {
	k := t.s.Traffic.Sticky
	if k == 0 || k > t.active {
		k = t.active
	}
	var pool []int
	for n := 0; n < t.active; n++ {
		if !slices.Contains(avoid, n) {
			pool = append(pool, n)
		}
	}
	if len(pool) < k {
		pool = pool[:0]
		for n := 0; n < t.active; n++ {
			pool = append(pool, n)
		}
	}
	t.rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	chosen := slices.Clone(pool[:k])
	weights := make([]float64, k)
	for i := range weights {
		weights[i] = 1
		if t.s.Traffic.Skew > 1 {
			weights[i] = 1 / math.Pow(float64(i+1), t.s.Traffic.Skew)
		}
	}
	t.nodes[tenant], t.cum[tenant] = chosen, cumulative(weights)
}

// arrived is how many tenants send at a time (Tenants.Arrival).
func (t *traffic) arrived(at time.Duration) int {
	if a := t.s.Tenants.Arrival; a > 0 {
		return min(int(at/a)+1, len(t.share))
	}
	return len(t.share)
}

// rate is the offered rate at a time, with bursts and the diurnal swing,
// and the part of it the tenants sending by then offer.
func (t *traffic) rate(at time.Duration) float64 {
	r := t.s.Rate
	if n := t.arrived(at); n < len(t.share) {
		r *= t.share[n-1] // the cumulative share of the tenants sending
	}
	if b := t.s.Traffic.Bursts; b != nil && at%b.Every < b.Length {
		r *= b.Factor
	}
	if d := t.s.Traffic.Diurnal; d != nil {
		r *= 1 + d.Amplitude*math.Sin(2*math.Pi*float64(at)/float64(d.Period))
	}
	return r
}

func (t *traffic) gap(at time.Duration) time.Duration {
	return at + time.Duration(t.rng.ExpFloat64()/t.rate(at)*float64(time.Second))
}

// peek returns the time of the next request.
func (t *traffic) peek() time.Duration { return t.next }

// pop returns the next request.
func (t *traffic) pop() request {
	at := t.next
	tenant := sort.SearchFloat64s(t.share, t.rng.Float64()*t.share[t.arrived(at)-1])
	tenant = min(tenant, len(t.share)-1)
	i := min(sort.SearchFloat64s(t.cum[tenant], t.rng.Float64()), len(t.nodes[tenant])-1)
	t.next = t.gap(at)
	return request{at: at, tenant: tenant, node: t.nodes[tenant][i]}
}

// moveTo pins a tenant's traffic to Sticky of the gateways in nodes (all
// of them when Sticky is 0 or more than there are).
func (t *traffic) moveTo(tenant int, nodes []int) {
	k := t.s.Traffic.Sticky
	if k == 0 || k > len(nodes) {
		k = len(nodes)
	}
	pool := slices.Clone(nodes)
	t.rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	weights := make([]float64, k)
	for i := range weights {
		weights[i] = 1
		if t.s.Traffic.Skew > 1 {
			weights[i] = 1 / math.Pow(float64(i+1), t.s.Traffic.Skew)
		}
	}
	t.nodes[tenant], t.cum[tenant] = pool[:k], cumulative(weights)
}

// shift moves a tenant's traffic to other gateways.
func (t *traffic) shift(tenant int) { t.pin(tenant, t.nodes[tenant]) }

// resize changes the fleet to n gateways; tenants pinned to a gateway
// that left are pinned anew.
func (t *traffic) resize(n int) {
	t.active = n
	for i, ns := range t.nodes {
		if t.s.Traffic.Sticky == 0 || slices.ContainsFunc(ns, func(x int) bool { return x >= n }) {
			t.pin(i, nil)
		}
	}
}
