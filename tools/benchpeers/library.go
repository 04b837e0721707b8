package main

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"golang.org/x/time/rate"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/rules"
)

// libraryResult is one library measurement: time per check, and how many
// checks were admitted.
type libraryResult struct {
	nsPerOp       float64
	allocs        int64
	admittedShare float64
}

func newAgent(n int) (*agent.Agent, error) {
	rs, err := rules.Parse("bench.yaml", []byte(rulesYAMLAt(n, admitAll)))
	if err != nil {
		return nil, err
	}
	return agent.New(agent.Config{Rules: rs, MaxKeys: 1 << 20})
}

// benchLibrary times Check on a: every check of the same request (hot),
// or the workload's requests, from one goroutine or GOMAXPROCS.
func benchLibrary(a *agent.Agent, hot, parallel bool) libraryResult {
	w := workload()
	reqs := make([]agent.Request, len(w.all))
	for i, q := range w.all {
		reqs[i] = agent.Request{Tenant: q.tenant, User: q.user, Route: q.route}
	}
	var admitted, total atomic.Int64
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Uint64
		run := func(pb func() bool) {
			var adm, n int64
			i := next.Add(1 << 16)
			for pb() {
				r := &reqs[0]
				if !hot {
					r = &reqs[i%uint64(len(reqs))]
					i++
				}
				if a.Check(*r).Allowed {
					adm++
				}
				n++
			}
			admitted.Add(adm)
			total.Add(n)
		}
		if parallel {
			b.RunParallel(func(pb *testing.PB) { run(pb.Next) })
			return
		}
		i := 0
		run(func() bool { i++; return i <= b.N })
	})
	return libraryResult{nsPerOp: float64(res.T.Nanoseconds()) / float64(res.N), allocs: res.AllocsPerOp(),
		admittedShare: float64(admitted.Load()) / float64(max(total.Load(), 1))}
}

// benchXRate times golang.org/x/time/rate's Allow on one limiter at the
// tenant rule's rate.
func benchXRate() libraryResult {
	l := rate.NewLimiter(rate.Limit(admitAll), admitAll)
	var admitted int64
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		admitted = 0
		for b.Loop() {
			if l.Allow() {
				admitted++
			}
		}
	})
	return libraryResult{nsPerOp: float64(res.T.Nanoseconds()) / float64(res.N), allocs: res.AllocsPerOp(), admittedShare: float64(admitted) / float64(res.N)}
}

// benchXRateScaling times x/time/rate with one limiter per goroutine,
// nothing shared, from one goroutine or GOMAXPROCS: how far this machine's
// cores scale work that shares no memory at all, the ceiling for any
// limiter.
func benchXRateScaling(parallel bool) libraryResult {
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		run := func(pb func() bool) {
			l := rate.NewLimiter(rate.Limit(admitAll), admitAll)
			for pb() {
				l.Allow()
			}
		}
		if parallel {
			b.RunParallel(func(pb *testing.PB) { run(pb.Next) })
			return
		}
		i := 0
		run(func() bool { i++; return i <= b.N })
	})
	return libraryResult{nsPerOp: float64(res.T.Nanoseconds()) / float64(res.N), allocs: res.AllocsPerOp()}
}

// library runs the library measurements.
func library() (map[string]libraryResult, error) {
	out := map[string]libraryResult{}
	oneTenant, err := agentOneRule()
	if err != nil {
		return nil, err
	}
	defer oneTenant.Close(context.Background())
	four, err := newAgent(4)
	if err != nil {
		return nil, err
	}
	defer four.Close(context.Background())
	out["1 rule, hot tenant"] = benchLibrary(oneTenant, true, false)
	out["x/time/rate"] = benchXRate()
	out["4 rules, hot key"] = benchLibrary(four, true, false)
	out["4 rules, zipf, 1 goroutine"] = benchLibrary(four, false, false)
	out[fmt.Sprintf("4 rules, zipf, %d goroutines", runtime.GOMAXPROCS(0))] = benchLibrary(four, false, true)
	out["x/time/rate unshared, 1 goroutine"] = benchXRateScaling(false)
	out["x/time/rate unshared, parallel"] = benchXRateScaling(true)
	return out, nil
}

// agentOneRule is an agent with the tenant rule alone.
func agentOneRule() (*agent.Agent, error) {
	rs, err := rules.Parse("bench.yaml", []byte("rules:\n  - {name: tenant, scope: tenant, algorithm: token_bucket, limit: 900000000, period: 1s, burst: 900000000, intent: capacity}\n"))
	if err != nil {
		return nil, err
	}
	return agent.New(agent.Config{Rules: rs})
}
