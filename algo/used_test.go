package algo

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestUsedAtAfterALowerLimit: a fixed window lowered below what it has
// spent (a smaller lease) has nothing remaining, and UsedAt still says
// what was spent, so that a node reports its whole spend; at the next
// window the count starts again. A sliding window's estimate stays
// clipped at the lowered limit.
func TestUsedAtAfterALowerLimit(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		alg  Algorithm
		at   time.Duration // after t0, when the lowered limit is asked
		want int64
	}{
		{FixedWindow, 10 * time.Second, 5},
		{FixedWindow, time.Minute, 0}, // the next window
		// A sliding window's estimate stays clipped at the limit: see UsedAt.
		{SlidingWindow, 10 * time.Second, 4},
		{SlidingWindow, time.Minute + 30*time.Second, 3}, // half of the previous window's: ⌈2.5⌉
		{SlidingWindow, 2 * time.Minute, 0},
	} {
		l, err := New(Config{Algorithm: tc.alg, Limit: 5, Period: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if !l.AllowAt(t0, 1).Allowed {
				t.Fatalf("%v: refused within the limit", tc.alg)
			}
		}
		if err := l.Reconfigure(Config{Algorithm: tc.alg, Limit: 4, Period: time.Minute}, t0); err != nil {
			t.Fatal(err)
		}
		at := t0.Add(tc.at)
		if got := l.UsedAt(at); got != tc.want {
			t.Errorf("%v at +%v: UsedAt %d after spending 5 and a lower limit of 4, want %d", tc.alg, tc.at, got, tc.want)
		}
		if d := l.PeekAt(at, 0); tc.want >= 4 && d.Remaining != 0 {
			t.Errorf("%v at +%v: remaining %d over a spent lower limit", tc.alg, tc.at, d.Remaining)
		}
	}
}

// TestPropertyUsedAtIsLimitLessRemaining: under a limit that was never
// lowered, UsedAt is Limit − Remaining, for every algorithm, after any
// sequence of requests.
func TestPropertyUsedAtIsLimitLessRemaining(t *testing.T) {
	for _, alg := range Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				cfg := genConfig(t, alg)
				l, _ := New(cfg)
				t0 := time.Unix(1_800_000_000, 0)
				for i, r := range genForward(t, cfg) {
					now := t0.Add(time.Duration(r.t))
					l.AllowAt(now, r.cost)
					d := l.PeekAt(now, 0)
					if got := l.UsedAt(now); got != d.Limit-d.Remaining {
						t.Fatalf("after request %d: UsedAt %d, Limit − Remaining %d − %d", i, got, d.Limit, d.Remaining)
					}
				}
			})
		})
	}
}
