package algo

import (
	"testing"
	"time"
)

// TestGCRARedisCell follows redis-cell's documented example
// CL.THROTTLE user123 15 30 60: max_burst 15, 30 per 60 s, so T = 2 s and
// τ = 30 s. Its first answer is limit 16, remaining 15, reset after 2 s.
func TestGCRARedisCell(t *testing.T) {
	l := mustNew(t, Config{Algorithm: GCRA, Limit: 30, Period: time.Minute, Burst: 15})
	d := l.AllowAt(t0, 1)
	want := Decision{Allowed: true, Limit: 16, Remaining: 15, ResetAfter: 2 * time.Second}
	if d != want {
		t.Fatalf("first request: got %+v, want %+v", d, want)
	}
}

// TestGCRABurst checks that the largest back-to-back burst is 1 + ⌊τ/T⌋ and
// that afterwards requests are admitted once per emission interval.
func TestGCRABurst(t *testing.T) {
	for _, burst := range []int64{0, 1, 5, 50} {
		l := mustNew(t, Config{Algorithm: GCRA, Limit: 10, Period: time.Second, Burst: burst})
		admitted := int64(0)
		for l.AllowAt(t0, 1).Allowed {
			admitted++
		}
		if admitted != 1+burst {
			t.Errorf("burst %d: %d admitted back to back, want 1+⌊τ/T⌋ = %d", burst, admitted, 1+burst)
		}
	}
	l := mustNew(t, Config{Algorithm: GCRA, Limit: 10, Period: time.Second, Burst: 2})
	ms := time.Millisecond
	run(t, l.AllowAt, []step{
		{0, 1, true, 2, 0, 100 * ms},
		{0, 1, true, 1, 0, 200 * ms},
		{0, 1, true, 0, 0, 300 * ms},
		{0, 1, false, 0, 100 * ms, 300 * ms},
		{50 * ms, 1, false, 0, 50 * ms, 250 * ms},
		{100 * ms, 1, true, 0, 0, 300 * ms},
		{150 * ms, 1, false, 0, 50 * ms, 250 * ms},
		{150 * ms, 0, true, 0, 50 * ms, 250 * ms},   // a peek spends nothing
		{400 * ms, 1, true, 2, 0, 100 * ms},         // TAT reached: full again
		{400 * ms, 4, false, 2, Never, 100 * ms},    // more than 1+Burst: never
		{time.Hour, 3, true, 0, 0, 300 * ms},        // back to full after a rest
		{time.Hour, 0, true, 0, 100 * ms, 300 * ms}, // peek when empty: next slot in T
	})
}

// TestGCRACost checks that a request of cost n takes n emission intervals.
func TestGCRACost(t *testing.T) {
	l := mustNew(t, Config{Algorithm: GCRA, Limit: 100, Period: time.Second, Burst: 9})
	ms := time.Millisecond
	run(t, l.AllowAt, []step{
		{0, 6, true, 4, 0, 60 * ms},
		{0, 5, false, 4, 10 * ms, 60 * ms},
		{10 * ms, 5, true, 0, 0, 100 * ms},
		{10 * ms, 11, false, 0, Never, 100 * ms},
	})
}

// TestGCRATimeBackwards checks that an earlier instant never buys capacity.
func TestGCRATimeBackwards(t *testing.T) {
	l := mustNew(t, Config{Algorithm: GCRA, Limit: 1, Period: time.Second})
	run(t, l.AllowAt, []step{
		{10 * time.Second, 1, true, 0, 0, time.Second},
		{5 * time.Second, 1, false, 0, 6 * time.Second, 6 * time.Second},
		{11 * time.Second, 1, true, 0, 0, time.Second},
	})
}
