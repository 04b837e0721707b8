package lease

import (
	"math/rand"
	"testing"
)

// BenchmarkRound is one allocation round for 100 nodes × 100,000 keys: ten
// million node-key pairs, each with its own demand and held lease, on one
// core. ns/op is the whole round; ns/pair and allocs/op show the cost per
// pair. Target: ≤ 1 s per round.
func BenchmarkRound(b *testing.B) {
	const nodes, keys = 100, 100_000
	r := rand.New(rand.NewSource(1))
	claims := make([][]Claim, keys)
	pools := make([]Pool, keys)
	for k := range claims {
		pools[k] = Pool{Limit: float64(100 + r.Intn(10_000)), Tolerance: 0.03}
		claims[k] = make([]Claim, nodes)
		for n := range claims[k] {
			c := &claims[k][n]
			c.Node, c.Present = int32(n), true
			c.Demand = r.ExpFloat64() * pools[k].Limit / nodes * 1.5
			c.Held = pools[k].Limit / nodes
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range claims {
			Allocate(pools[k], claims[k])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(nodes*keys), "ns/pair")
}

// BenchmarkFair10kTenants is the two-level allocation of one global capacity
// rule among 10,000 tenants, each at one of three priorities and spread over
// 1–8 of 100 nodes.
func BenchmarkFair10kTenants(b *testing.B) {
	const tenants, nodes = 10_000, 100
	r := rand.New(rand.NewSource(1))
	pool := Pool{Limit: 1_000_000, Tolerance: 0.03}
	classes := make([]Class, tenants)
	pairs := 0
	for i := range classes {
		c := &classes[i]
		c.Weight = float64(1 + r.Intn(5))
		c.Priority = Priority(1 + r.Intn(3))
		for n := 1 + r.Intn(8); n > 0; n-- {
			c.Claims = append(c.Claims, Claim{Node: int32(r.Intn(nodes)), Present: true, Demand: r.ExpFloat64() * 30, Held: 10})
			pairs++
		}
	}
	var a Allocator
	a.AllocateFair(pool, classes) // size the scratch space
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a.AllocateFair(pool, classes)
	}
	b.ReportMetric(float64(pairs), "pairs")
}
