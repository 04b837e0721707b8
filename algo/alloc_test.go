package algo

import (
	"testing"
	"time"
)

// TestAllowAtAllocatesNothing proves the hot path allocation-free: deciding
// for a Limiter, and for a key a Keyed store already holds, allocates
// nothing, for every algorithm.
func TestAllowAtAllocatesNothing(t *testing.T) {
	for _, alg := range Algorithms() {
		cfg := Config{Algorithm: alg, Limit: 100, Period: time.Second}
		l := mustNew(t, cfg)
		k := mustKeyed(t, cfg, KeyedOptions{})
		now := t0
		// Warm up: fill the sliding log's ring to its final size.
		for i := 0; i < 300; i++ {
			now = now.Add(time.Millisecond)
			l.AllowAt(now, 1)
			k.AllowAt("tenant:acme", now, 1)
		}
		if n := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Millisecond)
			l.AllowAt(now, 1)
		}); n != 0 {
			t.Errorf("%v Limiter.AllowAt: %v allocs per call", alg, n)
		}
		if n := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Millisecond)
			k.AllowAt("tenant:acme", now, 1)
		}); n != 0 {
			t.Errorf("%v Keyed.AllowAt: %v allocs per call", alg, n)
		}
	}
}
