package allocator

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// BenchmarkAllocatorInterval is one report interval of a fleet on the
// leader's allocator, without Raft or the network: every node's report
// folded in, as many at once as the machine has cores (as the gRPC server
// runs them), with the allocation rounds the leader runs in an interval
// (four), and every answer built. One op is one interval; ns/op is the
// leader's CPU for it, which must stay well under the interval itself.
//
// The pool is the one that grows with both dimensions: a global capacity
// rule whose classes are the tenants, and every node reporting every
// tenant (a least-connections balancer spreads each tenant's connections
// over the fleet), with Zipf-skewed demand: nodes × tenants claims.
//
//	go test -run '^$' -bench AllocatorInterval -benchtime 5x ./coordinator
func BenchmarkAllocatorInterval(b *testing.B) {
	for _, tc := range []struct{ nodes, tenants int }{{20, 500}, {50, 1000}, {100, 2000}} {
		b.Run(fmt.Sprintf("nodes=%d/tenants=%d", tc.nodes, tc.tenants), func(b *testing.B) {
			benchInterval(b, tc.nodes, tc.tenants)
		})
	}
}

func benchInterval(b *testing.B, nodes, tenants int) {
	a := New(Config{Region: "eu", ReportInterval: time.Second, LeaseTTL: 5 * time.Second})
	set, err := rules.NewSet(1, []rules.Rule{{
		Name: "capacity", Scope: rules.Global, Algorithm: algo.TokenBucket, Limit: 100_000, Period: time.Second, Burst: 100_000,
		Intent: lease.Capacity,
	}})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC).UnixNano()
	a.Lead(1, now, 0)
	a.SetRules(set)
	reqs := intervalReports(nodes, tenants)
	seq := uint64(0)
	interval := func() {
		seq++
		var wg sync.WaitGroup
		work := make(chan *allotpb.ReportRequest)
		var mu sync.Mutex
		var waiting []*Folded
		for range runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				for req := range work {
					req.SentUnixNano = now
					f := a.fold(req, now)
					mu.Lock()
					waiting = append(waiting, f)
					mu.Unlock()
				}
			})
		}
		answer := func() {
			// The reports folded since the last round are answered after
			// it, each by its own handler.
			mu.Lock()
			ready := waiting
			waiting = nil
			mu.Unlock()
			var aw sync.WaitGroup
			per := len(ready)/runtime.GOMAXPROCS(0) + 1
			for i := 0; i < len(ready); i += per {
				part := ready[i:min(i+per, len(ready))]
				aw.Go(func() {
					for _, f := range part {
						a.answer(f, now)
					}
				})
			}
			aw.Wait()
		}
		for i, req := range reqs {
			if i%(len(reqs)/4+1) == 0 {
				a.Tick(now)
				answer()
			}
			work <- req
		}
		close(work)
		wg.Wait()
		a.Tick(now)
		answer()
		now += int64(time.Second)
	}
	interval() // every claim made, every pool divided once
	interval()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		interval()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nodes), "ns/report")
}

// intervalReports builds every node's report of one interval: every
// tenant, each with the demand a Zipf-skewed load puts there.
func intervalReports(nodes, tenants int) []*allotpb.ReportRequest {
	rng := rand.New(rand.NewPCG(1, 2))
	reqs := make([]*allotpb.ReportRequest, nodes)
	for n := range reqs {
		reqs[n] = &allotpb.ReportRequest{Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: fmt.Sprintf("gw-%d", n), Incarnation: uint64(n + 1),
			Region: "eu", IntervalNano: int64(time.Second)}
	}
	for t := range tenants {
		// Tenant t's weight falls as 1/(t+1), spread unevenly over nodes.
		for _, req := range reqs {
			rate := 1000.0 / float64(t+1) * (0.5 + rng.Float64())
			req.Demand = append(req.Demand, &allotpb.KeyDemand{Rule: "capacity", Key: "", Tenant: fmt.Sprintf("tenant-%d", t),
				Admitted: rate, Held: rate})
		}
	}
	return reqs
}
