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

// TestSlidingWindowSlackFillsEveryWindow: a subject offering twice the
// limit, one unit at a time, admits Limit − 1 in every aligned window
// after the first without slack (the weighted previous count is a fraction
// rounded up until the window's last instant), and exactly Limit with a
// Slack of 1, never more: the slack is the estimate's, not the window's.
func TestSlidingWindowSlackFillsEveryWindow(t *testing.T) {
	for _, tt := range []struct {
		slack int64
		want  int64 // admitted in each window after the first
	}{
		{0, 599},
		{1, 600},
		{5, 600},
	} {
		l := mustNew(t, Config{Algorithm: SlidingWindow, Limit: 600, Period: time.Minute, Slack: tt.slack})
		perWindow := map[int64]int64{}
		for i := range int64(5 * 60 * 20) { // 20 a second for five minutes
			now := time.Duration(i) * 50 * time.Millisecond
			if l.AllowAt(at(now), 1).Allowed {
				perWindow[int64(now/time.Minute)]++
			}
		}
		if perWindow[0] != 600 {
			t.Errorf("slack %d: the first window admitted %d, want 600", tt.slack, perWindow[0])
		}
		for w := int64(1); w < 5; w++ {
			if perWindow[w] != tt.want {
				t.Errorf("slack %d: window %d admitted %d of 600, want %d", tt.slack, w, perWindow[w], tt.want)
			}
		}
	}
}

// TestSlidingWindowSlackWaits: with slack the estimate may exceed the
// limit, the window's count may not, and RetryAfter says when each allows.
func TestSlidingWindowSlackWaits(t *testing.T) {
	s := time.Second
	l := mustNew(t, Config{Algorithm: SlidingWindow, Limit: 10, Period: 10 * s, Slack: 1})
	run(t, l.AllowAt, []step{
		{0, 10, true, 0, 0, 20 * s},
		{5 * s, 1, false, 0, 5 * s, 15 * s},  // the window's count is full: the next window, at once (10 ≤ 11 − 1)
		{10 * s, 1, true, 0, 0, 20 * s},      // estimate 10 + 1 = 11, within the slack
		{10 * s, 1, false, 0, 1 * s, 20 * s}, // 10·(10−e)/10 ≤ 9 at e = 1 s
		{19 * s, 9, true, 0, 0, 11 * s},      // estimate 1 + 1 + 9 = 11, count 10
		{19 * s, 1, false, 0, 1 * s, 11 * s}, // count full: the next window, where ⌈10·(10−e)/10⌉ ≤ 10 at once
	})
}
