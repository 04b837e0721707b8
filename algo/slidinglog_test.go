package algo

import (
	"testing"
	"time"
)

// TestSlidingLogExact checks that the log admits exactly Limit in every
// trailing window, including across the boundary where a fixed window would
// admit twice the limit.
func TestSlidingLogExact(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 100, Period: time.Minute})
	admitted := 0
	for i := 0; i < 150; i++ {
		if l.AllowAt(at(59*time.Second), 1).Allowed {
			admitted++
		}
	}
	for i := 0; i < 150; i++ {
		if l.AllowAt(at(61*time.Second), 1).Allowed {
			admitted++
		}
	}
	if admitted != 100 {
		t.Errorf("admitted %d across a boundary, want exactly 100", admitted)
	}
	// The 100 admitted at 0:59 leave the window at 1:59, not before.
	if d := l.AllowAt(at(118*time.Second+999*time.Millisecond), 1); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Errorf("just before the admissions expire: %+v", d)
	}
	if d := l.AllowAt(at(119*time.Second), 100); !d.Allowed {
		t.Errorf("once they expire: %+v", d)
	}
}

func TestSlidingLogSteps(t *testing.T) {
	s := time.Second
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 5, Period: 10 * s})
	run(t, l.AllowAt, []step{
		{0, 0, true, 5, 0, 0},
		{1 * s, 2, true, 3, 0, 10 * s},
		{2 * s, 2, true, 1, 0, 10 * s},
		{3 * s, 2, false, 1, 8 * s, 9 * s}, // the 2 from 0:01 leave at 0:11
		{3 * s, 1, true, 0, 0, 10 * s},
		{4 * s, 0, true, 0, 7 * s, 9 * s}, // peek: one unit frees at 0:11
		{4 * s, 6, false, 0, Never, 9 * s},
		{12 * s, 5, false, 4, 1 * s, 1 * s}, // 0:01 and 0:02 have left (the window is (0:02, 0:12])
		{1 * s, 2, true, 2, 0, 21 * s},      // an earlier instant is judged at 0:12, the latest seen
		{13 * s, 3, true, 0, 0, 10 * s},     // 0:03 has left; 0:12's 2 plus 3
		{13 * s, 1, false, 0, 9 * s, 10 * s},
	})
}
