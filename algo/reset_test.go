package algo

import (
	"testing"
	"time"
)

// A reset key, or limiter, admits what a fresh one does, whatever the
// algorithm; other keys keep what they spent.
func TestResetStartsAfresh(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, SlidingLog, TokenBucket, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := Config{Algorithm: alg, Limit: 5, Period: time.Hour}
			switch alg {
			case TokenBucket:
				cfg.Burst = 5
			case GCRA:
				cfg.Burst = 4 // GCRA admits 1+Burst at once
			}
			k := mustKeyed(t, cfg, KeyedOptions{})
			h, other := k.Hasher().String("acme"), k.Hasher().String("globex")
			drain := func(h Hash) int {
				n := 0
				for k.AllowHashAt(h, t0, 1).Allowed {
					n++
				}
				return n
			}
			if n := drain(h); n != 5 {
				t.Fatalf("a fresh key admitted %d, want 5", n)
			}
			drain(other)
			if !k.ResetHash(h) || k.ResetHash(k.Hasher().String("initech")) {
				t.Fatal("ResetHash: held keys report true, others false")
			}
			if n := drain(h); n != 5 {
				t.Fatalf("the reset key admitted %d, want 5", n)
			}
			if k.AllowHashAt(other, t0, 1).Allowed {
				t.Fatal("another key was reset too")
			}
			// A key handed over stays handed over; given back, it is fresh.
			k.HandOverHashAt(h, t0, func(Decision) {})
			k.ResetHash(h)
			if d := k.AllowHashAt(h, t0, 1); !d.HandedOver {
				t.Fatalf("a handed-over key, reset: %+v", d)
			}
			k.TakeBackHash(h)
			if n := drain(h); n != 5 {
				t.Fatalf("taken back after a reset: admitted %d, want 5", n)
			}

			l, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for l.AllowAt(t0, 1).Allowed {
			}
			l.Reset()
			n := 0
			for l.AllowAt(t0, 1).Allowed {
				n++
			}
			if n != 5 {
				t.Fatalf("a reset limiter admitted %d, want 5", n)
			}
		})
	}
}
