package algo

import (
	"math/rand"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// Benchmarks compare against golang.org/x/time/rate in the same run, so the
// ratios hold on a noisy machine even when the absolute figures move.
// Run them with: make bench (or go test -run '^$' -bench . ./algo).

// ticks are 4096 instants 100 µs apart, precomputed so that the benchmarks
// time the limiter, not time.Time arithmetic. At 1000 per second with a
// burst of 50, stepping through them gives a mix of admissions and
// refusals.
var ticks = func() []time.Time {
	ts := make([]time.Time, 4096)
	for i := range ts {
		ts[i] = t0.Add(time.Duration(i) * 100 * time.Microsecond)
	}
	return ts
}()

func benchConfig(alg Algorithm) Config {
	cfg := Config{Algorithm: alg, Limit: 1000, Period: time.Second}
	if alg == GCRA || alg == TokenBucket {
		cfg.Burst = 50
	}
	return cfg
}

// BenchmarkLimiter is one subject's AllowAt, serial, with time advancing
// 100 µs per request. The ticks wrap every 4096 requests; time moving back
// then is handled like any other instant.
func BenchmarkLimiter(b *testing.B) {
	for _, alg := range Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			l := mustNew(b, benchConfig(alg))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				l.AllowAt(ticks[i&4095], 1)
			}
		})
	}
	b.Run("baseline=x-time-rate-AllowN", func(b *testing.B) {
		l := rate.NewLimiter(1000, 50)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			l.AllowN(ticks[i&4095], 1)
		}
	})
	b.Run("gcra-Allow-reads-clock", func(b *testing.B) {
		l := mustNew(b, benchConfig(GCRA))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			l.Allow(1)
		}
	})
	b.Run("baseline=x-time-rate-Allow-reads-clock", func(b *testing.B) {
		l := rate.NewLimiter(1000, 50)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			l.Allow()
		}
	})
}

// BenchmarkLimiterParallel is one subject shared by every core: the global
// rule every request touches.
func BenchmarkLimiterParallel(b *testing.B) {
	for _, alg := range []Algorithm{GCRA, TokenBucket, SlidingWindow} {
		b.Run(alg.String(), func(b *testing.B) {
			l := mustNew(b, benchConfig(alg))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					l.AllowAt(ticks[i&4095], 1)
				}
			})
		})
	}
	b.Run("baseline=x-time-rate-AllowN", func(b *testing.B) {
		l := rate.NewLimiter(1000, 50)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				l.AllowN(ticks[i&4095], 1)
			}
		})
	})
}

const benchKeys = 1 << 20 // 1,048,576 keys

// fixture holds what the keyed benchmarks share: a million key strings and
// pre-drawn access sequences, so that no benchmark pays for strings or
// random numbers inside its loop.
type fixture struct {
	keys    []string
	uniform []int32
	zipf    []int32
}

var (
	fixtureOnce sync.Once
	fix         fixture
)

func benchFixture() *fixture {
	fixtureOnce.Do(func() {
		const seqLen = 1 << 22
		r := rand.New(rand.NewSource(1))
		fix.keys = make([]string, benchKeys)
		for i := range fix.keys {
			fix.keys[i] = "tenant-" + strconv.Itoa(i%5000) + "/user-" + strconv.Itoa(i)
		}
		// Zipf over ranks, with ranks scattered over the keys so that the
		// hot keys are not neighbours in memory.
		perm := r.Perm(benchKeys)
		z := rand.NewZipf(r, 1.1, 1, benchKeys-1)
		fix.uniform = make([]int32, seqLen)
		fix.zipf = make([]int32, seqLen)
		for i := range fix.uniform {
			fix.uniform[i] = int32(r.Intn(benchKeys))
			fix.zipf[i] = int32(perm[z.Uint64()])
		}
	})
	return &fix
}

// mutexMap is the baseline: what a Go service writes first, one mutex around
// a map of golang.org/x/time/rate limiters.
type mutexMap struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func (mm *mutexMap) allow(key string, now time.Time) bool {
	mm.mu.Lock()
	l := mm.m[key]
	if l == nil {
		l = rate.NewLimiter(1000, 50)
		mm.m[key] = l
	}
	mm.mu.Unlock()
	return l.AllowN(now, 1)
}

// BenchmarkKeyed1M decides for 1M live keys, uniform and Zipf(1.1), serial
// and parallel, against the mutex-guarded map baseline in the same run.
func BenchmarkKeyed1M(b *testing.B) {
	f := benchFixture()
	now := t0
	k := mustKeyed(b, benchConfig(GCRA), KeyedOptions{MaxKeys: 2 * benchKeys})
	mm := &mutexMap{m: make(map[string]*rate.Limiter, benchKeys)}
	for _, key := range f.keys {
		k.AllowAt(key, now, 1)
		mm.allow(key, now)
	}
	for _, dist := range []struct {
		name string
		seq  []int32
	}{{"uniform", f.uniform}, {"zipf1.1", f.zipf}} {
		mask := len(dist.seq) - 1
		b.Run(dist.name+"/allot/serial", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				k.AllowAt(f.keys[dist.seq[i&mask]], now, 1)
			}
		})
		b.Run(dist.name+"/baseline=mutex-map/serial", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				mm.allow(f.keys[dist.seq[i&mask]], now)
			}
		})
		var offset sync.Mutex
		next := 0
		start := func() int { // give each goroutine its own stretch of the sequence
			offset.Lock()
			defer offset.Unlock()
			next += len(dist.seq) / 8
			return next
		}
		b.Run(dist.name+"/allot/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for i := start(); pb.Next(); i++ {
					k.AllowAt(f.keys[dist.seq[i&mask]], now, 1)
				}
			})
		})
		b.Run(dist.name+"/baseline=mutex-map/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for i := start(); pb.Next(); i++ {
					mm.allow(f.keys[dist.seq[i&mask]], now)
				}
			})
		})
	}
}

// BenchmarkKeyedMemory reports the heap held per key by a store of 1M keys.
// Key strings are not stored by Keyed, so the figure excludes key bytes by
// construction; the baseline's figure excludes them too (the strings exist
// before measuring).
func BenchmarkKeyedMemory(b *testing.B) {
	f := benchFixture()
	measure := func(b *testing.B, fill func() any) {
		for b.Loop() {
			before := heapInUse()
			keep := fill()
			after := heapInUse()
			b.ReportMetric(float64(after-before)/benchKeys, "bytes/key")
			runtime.KeepAlive(keep)
		}
	}
	b.Run("allot", func(b *testing.B) {
		measure(b, func() any {
			k := mustKeyed(b, benchConfig(GCRA), KeyedOptions{MaxKeys: 2 * benchKeys})
			for _, key := range f.keys {
				k.AllowAt(key, t0, 1)
			}
			return k
		})
	})
	b.Run("baseline=mutex-map", func(b *testing.B) {
		measure(b, func() any {
			mm := &mutexMap{m: map[string]*rate.Limiter{}}
			for _, key := range f.keys {
				mm.allow(key, t0)
			}
			return mm
		})
	})
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
