package algo

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestKeyedHandOver: a handed-over key's state is read once, under the
// key's lock; the store then decides nothing and takes no refund for it,
// other keys are untouched, and once taken back it decides from the state
// it held.
func TestKeyedHandOver(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, SlidingLog, TokenBucket, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			var burst int64 // a capacity of 3 for every algorithm
			switch alg {
			case TokenBucket:
				burst = 3
			case GCRA:
				burst = 2 // GCRA admits 1+Burst at once
			}
			k := mustKeyed(t, Config{Algorithm: alg, Limit: 3, Period: time.Hour, Burst: burst}, KeyedOptions{})
			h, other := k.Hasher().String("acme"), k.Hasher().String("globex")
			k.AllowHashAt(h, t0, 1)
			k.AllowHashAt(h, t0, 1)
			var seen Decision
			k.HandOverHashAt(h, t0, func(d Decision) { seen = d })
			if used := seen.Limit - seen.Remaining; used != 2 || seen.HandedOver {
				t.Errorf("the state handed over: %+v; want 2 used", seen)
			}
			if d := k.AllowHashAt(h, t0, 1); !d.HandedOver || d.Allowed {
				t.Errorf("a check after the handover: %+v; want HandedOver, not admitted", d)
			}
			k.ReturnHashAt(h, t0, 2)
			if d := k.AllowHashAt(other, t0, 1); d.HandedOver || !d.Allowed {
				t.Errorf("another key: %+v", d)
			}
			k.TakeBackHash(h)
			if d := k.AllowHashAt(h, t0, 1); d.HandedOver || !d.Allowed || d.Remaining != 0 {
				t.Errorf("the first check taken back: %+v; want the third unit admitted, none left", d)
			}
			if d := k.AllowHashAt(h, t0, 1); d.Allowed {
				t.Errorf("the fourth unit: %+v; want refused", d)
			}
		})
	}
}

// TestKeyedHandOverCountsOnce: checks from several goroutines race a
// handover; every unit admitted is either in the state handed over or
// admitted by the caller's limiter after it, never both and never lost.
func TestKeyedHandOverCountsOnce(t *testing.T) {
	const limit = 1000
	for range 20 {
		k := mustKeyed(t, Config{Algorithm: FixedWindow, Limit: limit, Period: time.Hour}, KeyedOptions{})
		h := k.Hasher().String("acme")
		hot, err := New(Config{Algorithm: FixedWindow, Limit: limit, Period: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		var ready atomic.Bool
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range limit {
					var d Decision
					if ready.Load() {
						d = hot.AllowAt(t0, 1)
					} else if d = k.AllowHashAt(h, t0, 1); d.HandedOver {
						d = hot.AllowAt(t0, 1)
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		k.HandOverHashAt(h, t0, func(d Decision) {
			if used := d.Limit - d.Remaining; used > 0 {
				hot.AllowAt(t0, used)
			}
			ready.Store(true)
		})
		wg.Wait()
		if n := admitted.Load(); n != limit {
			t.Fatalf("%d admitted across the handover, want exactly %d", n, limit)
		}
	}
}
