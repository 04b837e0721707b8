package algo

import (
	"testing"
	"time"
)

// TestSlidingWindowWorkedExample is the design's example: at 10:01:15 with a
// 60 s window, previous 80 and current 30 give an estimate of
// 80 × 0.75 + 30 = 90, under a limit of 100, so the request is allowed.
func TestSlidingWindowWorkedExample(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingWindow, Limit: 100, Period: time.Minute})
	// t0 is 10:00:00. 80 requests in the 10:00 window, 30 in 10:01.
	if d := l.AllowAt(at(30*time.Second), 80); !d.Allowed {
		t.Fatalf("previous window: %+v", d)
	}
	if d := l.AllowAt(at(time.Minute+15*time.Second), 30); !d.Allowed {
		t.Fatalf("current window: %+v", d)
	}
	d := l.AllowAt(at(time.Minute+15*time.Second), 0)
	if !d.Allowed || d.Remaining != 10 {
		t.Fatalf("peek at 10:01:15: got %+v, want estimate 90 (remaining 10)", d)
	}
	// Cost 10 fits exactly (90 + 10 = 100); one more does not.
	if d := l.AllowAt(at(time.Minute+15*time.Second), 11); d.Allowed {
		t.Fatalf("cost 11 over an estimate of 90 admitted: %+v", d)
	}
	if d := l.AllowAt(at(time.Minute+15*time.Second), 10); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("cost 10 over an estimate of 90: %+v", d)
	}
	// Now 40 in the current window; the previous 80 decay at 80/60 per
	// second, so one more request fits once 80·(60−e)/60 ≤ 59, at
	// e = 60 − 59·60/80 = 15.75 s: 750 ms later.
	d = l.AllowAt(at(time.Minute+15*time.Second), 1)
	if d.Allowed || d.RetryAfter != 750*time.Millisecond {
		t.Fatalf("over the limit: got %+v, want RetryAfter 750ms", d)
	}
	if d := l.AllowAt(at(time.Minute+15*time.Second+749*time.Millisecond), 1); d.Allowed {
		t.Fatalf("before RetryAfter: %+v", d)
	}
	if d := l.AllowAt(at(time.Minute+15*time.Second+750*time.Millisecond), 1); !d.Allowed {
		t.Fatalf("after RetryAfter: %+v", d)
	}
}

func TestSlidingWindowSteps(t *testing.T) {
	s := time.Second
	l := mustNew(t, Config{Algorithm: SlidingWindow, Limit: 10, Period: 10 * s})
	run(t, l.AllowAt, []step{
		{0, 10, true, 0, 0, 20 * s},
		{5 * s, 1, false, 0, 6 * s, 15 * s},   // needs the next window: 10·(10−e)/10 ≤ 9 at e = 1 s
		{11 * s, 1, true, 0, 0, 19 * s},       // estimate 10·0.9 = 9, plus 1
		{12 * s, 2, false, 1, 1 * s, 18 * s},  // estimate 8 + 1 = 9; 2 fit at e = 3 s
		{13 * s, 2, true, 0, 0, 17 * s},       // estimate 7 + 1 + 2 = 10
		{13 * s, 11, false, 0, Never, 17 * s}, // more than the limit
		{40 * s, 3, true, 7, 0, 20 * s},       // two windows later: both counts gone
		{39 * s, 7, true, 0, 0, 21 * s},       // earlier instant counts in the newer window
	})
}
