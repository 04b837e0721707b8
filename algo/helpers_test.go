package algo

import (
	"testing"
	"time"
)

// t0 is an arbitrary instant on a minute boundary; tests step from it.
var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// at returns t0 plus d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// step is one request in a scripted test: at t0+t, cost n, and what the
// decision must say. Fields left at -2 are not checked.
type step struct {
	t         time.Duration
	n         int64
	ok        bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

const unchecked = -2

// run drives a limiter through steps and reports the first mismatch of each.
func run(t *testing.T, allow func(time.Time, int64) Decision, steps []step) {
	t.Helper()
	for i, s := range steps {
		d := allow(at(s.t), s.n)
		if d.Allowed != s.ok {
			t.Errorf("step %d (t=%v n=%d): Allowed = %v, want %v (%+v)", i, s.t, s.n, d.Allowed, s.ok, d)
			continue
		}
		if s.remaining != unchecked && d.Remaining != s.remaining {
			t.Errorf("step %d (t=%v n=%d): Remaining = %d, want %d (%+v)", i, s.t, s.n, d.Remaining, s.remaining, d)
		}
		if s.retry != unchecked && d.RetryAfter != s.retry {
			t.Errorf("step %d (t=%v n=%d): RetryAfter = %v, want %v (%+v)", i, s.t, s.n, d.RetryAfter, s.retry, d)
		}
		if s.reset != unchecked && d.ResetAfter != s.reset {
			t.Errorf("step %d (t=%v n=%d): ResetAfter = %v, want %v (%+v)", i, s.t, s.n, d.ResetAfter, s.reset, d)
		}
	}
}

func mustNew(t testing.TB, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return l
}
