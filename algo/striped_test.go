package algo

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestStripedStaysWithinItsBound runs random request sequences through a
// Striped. Over every span of the sequence it admits at most what its
// limiter can (capacity + rate × span) plus what the stripes can hold
// (stripes × chunk): units taken into stripes while the limiter refills
// are the only units on top. And it refuses only when the stripes hold
// nothing: units held are never the reason for a refusal.
func TestStripedStaysWithinItsBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alg := rapid.SampledFrom([]Algorithm{TokenBucket, GCRA}).Draw(t, "alg")
		cfg := genConfig(t, alg)
		stripes := rapid.IntRange(2, 8).Draw(t, "stripes")
		chunk := rapid.Int64Range(2, 8).Draw(t, "chunk")
		lim, _ := New(cfg)
		s := NewStriped(lim, stripes, chunk)
		t0 := time.Unix(1_700_000_000, 0)
		capacity := s.AllowAt(t0, 0).Limit
		held := int64(stripes) * chunk
		reqs := genForward(t, cfg)
		admitted := make([]int64, len(reqs))
		for i, r := range reqs {
			d := s.AllowAt(t0.Add(time.Duration(r.t)), r.cost)
			if d.Allowed {
				admitted[i] = r.cost
			}
			if r.cost > 0 && (d.Allowed && d.RetryAfter != 0 || !d.Allowed && d.RetryAfter == 0) {
				t.Fatalf("step %d: %+v", i, d)
			}
			if h := s.Held(); h < 0 || h > held {
				t.Fatalf("step %d: stripes hold %d units, at most %d", i, h, held)
			}
			if !d.Allowed && r.cost <= capacity && s.Held() != 0 {
				t.Fatalf("step %d: refused while stripes hold %d units", i, s.Held())
			}
		}
		rate := float64(cfg.Limit) / float64(cfg.Period)
		for i := range reqs {
			var sum int64
			for j := i; j < len(reqs); j++ {
				sum += admitted[j]
				if bound := float64(capacity+held) + rate*float64(reqs[j].t-reqs[i].t) + 1; float64(sum) > bound {
					t.Fatalf("steps %d..%d admitted %d, over %.1f", i, j, sum, bound)
				}
			}
		}
	})
}

// TestStripedConcurrentExact hammers a Striped from many goroutines with a
// limit that does not refill during the test: exactly its capacity is
// admitted, however the units moved among stripes.
func TestStripedConcurrentExact(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := Config{Algorithm: alg, Limit: 1, Period: time.Hour, Burst: 5000}
			lim, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s := NewStriped(lim, 8, 16)
			capacity := s.AllowAt(time.Unix(0, 1), 0).Limit
			now := time.Unix(0, 1)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 2000 {
						if s.AllowAt(now, 1).Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if admitted.Load() != capacity {
				t.Fatalf("admitted %d of a capacity of %d", admitted.Load(), capacity)
			}
		})
	}
}

// TestStripedReturnAndPeek: units given back are admitted again, and a
// peek counts what stripes hold as remaining.
func TestStripedReturnAndPeek(t *testing.T) {
	lim, _ := New(Config{Algorithm: TokenBucket, Limit: 1, Period: time.Hour, Burst: 100})
	s := NewStriped(lim, 4, 10)
	now := time.Unix(0, 1)
	for range 100 {
		if !s.AllowAt(now, 1).Allowed {
			t.Fatal("refused within the capacity")
		}
	}
	if d := s.AllowAt(now, 1); d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("over the capacity: %+v", d)
	}
	s.ReturnAt(now, 3)
	for i := range 3 {
		if !s.AllowAt(now, 1).Allowed {
			t.Fatalf("a returned unit %d refused", i)
		}
	}
	if s.AllowAt(now, 1).Allowed {
		t.Fatal("more admitted than returned")
	}
	lim2, _ := New(Config{Algorithm: TokenBucket, Limit: 1, Period: time.Hour, Burst: 100})
	s2 := NewStriped(lim2, 4, 10)
	s2.AllowAt(now, 1)
	if d := s2.AllowAt(now, 0); d.Remaining != 99 {
		t.Fatalf("peek: remaining %d, want 99 (stripes' units counted)", d.Remaining)
	}
}

// TestStripedEmptyAnswersOneUnit: while a Striped knows its limiter has
// not one unit (a request of one was refused), it refuses a request of
// one at once; a larger cost is answered as the limiter answers it, and
// as PeekAt does: its longer wait, or Never for a cost the limit can
// never admit. Known empty, a request of 2 was told to come back when
// one unit would be there, and one of 3, which a limit of 2 never
// admits, the same (found by agent's TestPropertyPeekAnswersAsCheck).
func TestStripedEmptyAnswersOneUnit(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA, FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := Config{Algorithm: alg, Limit: 2, Period: time.Second}
			if alg == TokenBucket {
				cfg.Burst = 2
			}
			if alg == GCRA {
				cfg.Burst = 1
			}
			lim, twin := mustNew(t, cfg), mustNew(t, cfg)
			s := NewStriped(lim, 4, 0)
			now := time.Unix(0, 1)
			for i := range 2 {
				if !s.AllowAt(now, 1).Allowed || !twin.AllowAt(now, 1).Allowed {
					t.Fatalf("unit %d refused", i+1)
				}
			}
			if d, w := s.AllowAt(now, 1), twin.AllowAt(now, 1); d.Allowed || d.RetryAfter != w.RetryAfter {
				t.Fatalf("a unit over the limit: %+v; the limiter alone: %+v", d, w)
			}
			later := now.Add(time.Millisecond)
			for _, cost := range []int64{1, 2, 3} {
				d, w, p := s.AllowAt(later, cost), twin.AllowAt(later, cost), s.PeekAt(later, cost)
				if d.Allowed || d.RetryAfter != w.RetryAfter || p.RetryAfter != w.RetryAfter {
					t.Errorf("cost %d, known empty: %+v; peeked %+v; the limiter alone: %+v", cost, d, p, w)
				}
			}
		})
	}
}

// TestStripedWindowsAreExact: a window algorithm is never striped.
func TestStripedWindowsAreExact(t *testing.T) {
	lim, _ := New(Config{Algorithm: FixedWindow, Limit: 100, Period: time.Hour})
	s := NewStriped(lim, 8, 16)
	if s.Stripes() != 0 {
		t.Fatalf("a fixed window striped into %d", s.Stripes())
	}
	s.AllowAt(time.Unix(0, 1), 1)
	if s.Held() != 0 {
		t.Fatal("a window's units held in stripes")
	}
}

func TestStripedAllocatesNothing(t *testing.T) {
	lim, _ := New(Config{Algorithm: TokenBucket, Limit: 1_000_000, Period: time.Second, Burst: 1_000_000})
	s := NewStriped(lim, 8, 64)
	now := time.Unix(0, 1)
	if n := testing.AllocsPerRun(1000, func() {
		s.AllowAt(now, 1)
		s.ReturnAt(now, 1)
	}); n != 0 {
		t.Fatalf("%v allocations per check", n)
	}
}

// BenchmarkStriped compares one limiter shared by every goroutine with the
// same limiter striped, far from its limit (every request admitted) and
// saturated (almost every request refused).
//
//	go test -run '^$' -bench Striped -cpu 1,2 ./algo
func BenchmarkStriped(b *testing.B) {
	for _, load := range []struct {
		name string
		rate int64
	}{{"admitting", 1_000_000_000}, {"saturated", 1000}} {
		for _, striped := range []bool{false, true} {
			name := load.name + "/limiter"
			if striped {
				name = load.name + "/striped"
			}
			b.Run(name, func(b *testing.B) {
				lim, _ := New(Config{Algorithm: TokenBucket, Limit: load.rate, Period: time.Second, Burst: max(load.rate/10, 100)})
				var s *Striped
				if striped {
					s = NewStriped(lim, 8, 64)
				}
				var admitted atomic.Int64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					var n int64
					for pb.Next() {
						var d Decision
						if s != nil {
							d = s.AllowAt(time.Now(), 1)
						} else {
							d = lim.AllowAt(time.Now(), 1)
						}
						if d.Allowed {
							n++
						}
					}
					admitted.Add(n)
				})
				b.ReportMetric(100*float64(admitted.Load())/float64(b.N), "%admitted")
			})
		}
	}
}
