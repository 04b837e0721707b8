package main

import (
	"testing"
	"time"
)

// TestStallWatch: a slow check is judged by what it took beyond the
// stalls it overlapped, so a check held up by the machine passes and one
// that waited on something else does not.
func TestStallWatch(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var w stallWatch
	w.stalls = []span{{at(100), at(170)}, {at(500), at(520)}}
	w.check(at(98), at(172))  // 74 ms, 70 of them stalled: 4 beyond
	w.check(at(200), at(205)) // fast: not kept
	if beyond, _ := w.worstUnexplained(); beyond != 4*time.Millisecond {
		t.Fatalf("a check held up by a stall: %v beyond the stall, want 4ms", beyond)
	}
	w.check(at(480), at(600)) // 120 ms, 20 stalled: 100 beyond
	if beyond, took := w.worstUnexplained(); beyond != 100*time.Millisecond || took != 120*time.Millisecond {
		t.Fatalf("a check that waited: %v beyond the stalls of %v, want 100ms of 120ms", beyond, took)
	}
	if total, longest := w.stalled(); total != 90*time.Millisecond || longest != 70*time.Millisecond {
		t.Fatalf("stalled %v, longest %v; want 90ms and 70ms", total, longest)
	}
}
