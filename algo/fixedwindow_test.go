package algo

import (
	"testing"
	"time"
)

// TestFixedWindowBoundaryBurst shows the design's known flaw: a client that
// spends its allowance at the end of one window and again at the start of
// the next pushes twice the limit through in a moment.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	l := mustNew(t, Config{Algorithm: FixedWindow, Limit: 100, Period: time.Minute})
	admitted := 0
	for i := 0; i < 150; i++ {
		if l.AllowAt(at(59*time.Second+999*time.Millisecond), 1).Allowed {
			admitted++
		}
	}
	for i := 0; i < 150; i++ {
		if l.AllowAt(at(time.Minute), 1).Allowed {
			admitted++
		}
	}
	if admitted != 200 {
		t.Errorf("admitted %d within one millisecond across the boundary, want 2×100", admitted)
	}
}

func TestFixedWindowSteps(t *testing.T) {
	s := time.Second
	l := mustNew(t, Config{Algorithm: FixedWindow, Limit: 3, Period: 10 * s})
	run(t, l.AllowAt, []step{
		{0, 0, true, 3, 0, 0}, // fresh: nothing to reset
		{2 * s, 2, true, 1, 0, 8 * s},
		{3 * s, 2, false, 1, 7 * s, 7 * s},
		{3 * s, 1, true, 0, 0, 7 * s},
		{4 * s, 0, true, 0, 6 * s, 6 * s}, // peek when spent
		{5 * s, 4, false, 0, Never, 5 * s},
		{10 * s, 3, true, 0, 0, 10 * s},      // new window, aligned to the epoch
		{9 * s, 1, false, 0, 11 * s, 11 * s}, // an earlier instant stays in the newer window
		{35 * s, 1, true, 2, 0, 5 * s},
	})
}
