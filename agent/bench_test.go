package agent

import (
	"context"
	"math/rand"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"golang.org/x/time/rate"
)

// The benchmarks measure Check as a gateway calls it: the default clock
// (refreshed every millisecond in the background), a Request built from
// strings the gateway already holds, over a million live keys. Run:
//
//	go test -run '^$' -bench Check -benchtime 2s ./agent

const benchUsers = 1 << 20

type benchFixture struct {
	reqs    []Request // one per user, each with its own tenant and route
	uniform []int32
	zipf    []int32
}

var (
	benchOnce sync.Once
	benchFix  benchFixture
)

func fixture() *benchFixture {
	benchOnce.Do(func() {
		r := rand.New(rand.NewSource(1))
		f := &benchFix
		f.reqs = make([]Request, benchUsers)
		routes := []string{"/v1/search", "/v1/items", "/v1/orders", "/v1/users"}
		for i := range f.reqs {
			f.reqs[i] = Request{
				Tenant: "tenant-" + strconv.Itoa(i%5000), User: "user-" + strconv.Itoa(i),
				Route: routes[i%len(routes)], IP: "10.0." + strconv.Itoa(i/256%256) + "." + strconv.Itoa(i%256),
			}
		}
		perm := r.Perm(benchUsers)
		z := rand.NewZipf(r, 1.1, 1, benchUsers-1)
		f.uniform = make([]int32, 1<<22)
		f.zipf = make([]int32, 1<<22)
		for i := range f.uniform {
			f.uniform[i] = int32(r.Intn(benchUsers))
			f.zipf[i] = int32(perm[z.Uint64()])
		}
	})
	return &benchFix
}

func benchAgent(b *testing.B, rs []rules.Rule) *Agent {
	// Keys stay live for a minute after they return to rest, so all 1M
	// stay in the table during the benchmark.
	a, err := New(Config{Rules: rs, MaxKeys: 4 * benchUsers, IdleTTL: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close(context.Background()) })
	for i := range fixture().reqs {
		a.Check(fixture().reqs[i])
	}
	return a
}

// BenchmarkCheck is Check over 1M live keys: one rule (per user) and the
// four-level hierarchy, uniform and Zipf(1.1) access, serial and parallel;
// with a mutex-guarded map of golang.org/x/time/rate limiters, a user each,
// as the baseline in the same run.
func BenchmarkCheck(b *testing.B) {
	f := fixture()
	one := []rules.Rule{rule("user", rules.User, algo.GCRA, 100_000, time.Second, lease.Capacity)}
	one[0].Burst = 1000
	sets := []struct {
		name  string
		rules []rules.Rule
	}{
		// The headline: limits no benchmark reaches, so every check is
		// admitted and pays for being counted, as a gateway's checks do.
		{"admitted/rules=1", admitAll(1)}, {"admitted/rules=4", admitAll(4)},
		// The same key shapes at limits the hot key exceeds: mostly
		// refusals, the path an abusive client takes.
		{"limited/rules=1", one}, {"limited/rules=4", fourLevels()},
	}
	for _, set := range sets {
		a := benchAgent(b, set.rules)
		// One hot key: the cost of Check itself, every line in cache.
		b.Run(set.name+"/hot/serial", func(b *testing.B) {
			req := f.reqs[0]
			b.ReportAllocs()
			var adm int
			for i := 0; i < b.N; i++ {
				if a.Check(req).Allowed {
					adm++
				}
			}
			reportAdmitted(b, adm)
		})
		// The same key peeked at: what a UI showing what is left costs.
		b.Run(set.name+"/hot/peek/serial", func(b *testing.B) {
			req := f.reqs[0]
			req.Peek = true
			b.ReportAllocs()
			var adm int
			for i := 0; i < b.N; i++ {
				if a.Check(req).Allowed {
					adm++
				}
			}
			reportAdmitted(b, adm)
		})
		for _, dist := range []struct {
			name string
			seq  []int32
		}{{"zipf", f.zipf}, {"uniform", f.uniform}} {
			mask := len(dist.seq) - 1
			b.Run(set.name+"/"+dist.name+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				var adm int
				for i := 0; i < b.N; i++ {
					if a.Check(f.reqs[dist.seq[i&mask]]).Allowed {
						adm++
					}
				}
				reportAdmitted(b, adm)
			})
			b.Run(set.name+"/"+dist.name+"/peek/serial", func(b *testing.B) {
				b.ReportAllocs()
				var adm int
				for i := 0; i < b.N; i++ {
					req := f.reqs[dist.seq[i&mask]]
					req.Peek = true
					if a.Check(req).Allowed {
						adm++
					}
				}
				reportAdmitted(b, adm)
			})
			var offset atomic.Int64
			b.Run(set.name+"/"+dist.name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				var adm atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					var n int64
					for i := int(offset.Add(1 << 20)); pb.Next(); i++ {
						if a.Check(f.reqs[dist.seq[i&mask]]).Allowed {
							n++
						}
					}
					adm.Add(n)
				})
				reportAdmitted(b, int(adm.Load()))
			})
		}
	}
	mm := &mutexMap{m: make(map[string]*rate.Limiter, benchUsers)}
	for i := range f.reqs {
		mm.allow(f.reqs[i].User)
	}
	b.Run("baseline=mutex-map-time.Now/zipf/serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			mm.allow(f.reqs[f.zipf[i&(len(f.zipf)-1)]].User)
		}
	})
}

// admitAll is the first n of the four-level hierarchy's scopes (global,
// tenant, user, route), each a token bucket whose rate and burst no
// benchmark reaches: every check is admitted. They are the rules
// make bench-peers times in Allot and in Redis.
func admitAll(n int) []rules.Rule {
	const limit = 900_000_000
	rs := []rules.Rule{
		rule("tenant", rules.Tenant, algo.TokenBucket, limit, time.Second, lease.Capacity),
		rule("global", rules.Global, algo.TokenBucket, limit, time.Second, lease.Capacity),
		rule("user", rules.User, algo.TokenBucket, limit, time.Second, lease.Capacity),
		rule("route", rules.Route, algo.TokenBucket, limit, time.Second, lease.Capacity),
	}
	for i := range rs {
		rs[i].Burst = limit
	}
	return rs[:n]
}

// reportAdmitted reports the share of checks admitted: a figure from a
// run that mostly refused measures the refusal path.
func reportAdmitted(b *testing.B, admitted int) {
	b.ReportMetric(100*float64(admitted)/float64(max(b.N, 1)), "%admitted")
}

// mutexMap is what a Go service writes first: one mutex around a map of
// x/time/rate limiters, reading the clock on every request.
type mutexMap struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func (mm *mutexMap) allow(key string) bool {
	mm.mu.Lock()
	l := mm.m[key]
	if l == nil {
		l = rate.NewLimiter(100_000, 1000)
		mm.m[key] = l
	}
	mm.mu.Unlock()
	return l.Allow()
}

// BenchmarkAgentMemory reports the heap held per live key by an agent
// enforcing a per-user rule over 10M users. The request strings exist
// before measuring and the agent stores no key strings, so the figure
// excludes key bytes. Run with -benchtime 1x: it takes a while.
func BenchmarkAgentMemory(b *testing.B) {
	const keys = 10_000_000
	users := make([]string, keys)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	for b.Loop() {
		before := heap()
		a, err := New(Config{Rules: []rules.Rule{rule("user", rules.User, algo.GCRA, 100, time.Second, lease.Capacity)}, MaxKeys: keys, IdleTTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		for i, u := range users {
			a.Check(Request{Tenant: "tenant-" + strconv.Itoa(i%64), User: u})
		}
		after := heap()
		b.ReportMetric(float64(after-before)/keys, "bytes/key")
		b.ReportMetric(float64(a.rules.Load().rules[0].def.keyed.Len()), "keys")
		a.Close(context.Background())
	}
}

func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
