package main

import (
	"context"
	"sync"
	"time"
)

// The demo runs on whatever else the machine runs. When the machine does
// not run the demo's process for a while (other processes on the cores,
// a container's CPU quota spent), its drivers send late and a check in
// flight takes that long: neither is the system's doing, and the checks
// must tell them from what is (a check that waits on the coordinators, a
// gateway refusing what the quota had room for).

// lagBucket is the resolution of demoTenant.lateness.
const lagBucket = 10 * time.Millisecond

// late records that a request due at due was sent lag late.
func (t *demoTenant) late(due, lag time.Duration) {
	i := int(due / lagBucket)
	if i >= len(t.lateness) {
		t.lateness = append(t.lateness, make([]time.Duration, i+1-len(t.lateness))...)
	}
	t.lateness[i] = max(t.lateness[i], lag)
}

// lateAt is how late the requests due around at were sent, at most.
func (t *demoTenant) lateAt(at time.Duration) time.Duration {
	var out time.Duration
	for i := int(at/lagBucket) - 1; i <= int(at/lagBucket)+1; i++ {
		if i >= 0 && i < len(t.lateness) {
			out = max(out, t.lateness[i])
		}
	}
	return out
}

// stallTick is how often the stall watch asks to run; stallMin the least
// lateness it records as a stall.
const (
	stallTick = time.Millisecond
	stallMin  = 5 * time.Millisecond
)

// stallWatch records when the demo's process was not run: a goroutine
// that asks to wake every millisecond and notes each wake-up more than
// stallMin late. A goroutine blocked on a lock or a network call stalls
// alone, and the watch goes on waking; when the machine does not run the
// process, nothing in it runs, the watch included. It also keeps the
// checks that took long, to set against the stalls.
type stallWatch struct {
	mu     sync.Mutex
	stalls []span // in order
	slow   []span // checks that took at least slowCheck
}

type span struct{ from, to time.Time }

// slowCheck is how long a check must take to be kept for the summary.
const slowCheck = 10 * time.Millisecond

// run watches until ctx ends.
func (w *stallWatch) run(ctx context.Context) {
	tick := time.NewTicker(stallTick)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		if now.Sub(last) > stallTick+stallMin {
			w.mu.Lock()
			w.stalls = append(w.stalls, span{last, now})
			w.mu.Unlock()
		}
		last = now
	}
}

// check notes a check that ran from begin to end, if it took long.
func (w *stallWatch) check(begin, end time.Time) {
	if end.Sub(begin) < slowCheck {
		return
	}
	w.mu.Lock()
	w.slow = append(w.slow, span{begin, end})
	w.mu.Unlock()
}

// worstUnexplained is the longest a slow check took beyond the stalls it
// overlapped, with what the check took in all.
func (w *stallWatch) worstUnexplained() (beyond, took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.slow {
		var stalled time.Duration
		for _, s := range w.stalls {
			if from, to := maxTime(c.from, s.from), minTime(c.to, s.to); to.After(from) {
				stalled += to.Sub(from)
			}
		}
		if b := c.to.Sub(c.from) - stalled; b > beyond {
			beyond, took = b, c.to.Sub(c.from)
		}
	}
	return beyond, took
}

// stalled is the time the process was not run, in all, and the longest
// such stall.
func (w *stallWatch) stalled() (total, longest time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.stalls {
		d := s.to.Sub(s.from)
		total += d
		longest = max(longest, d)
	}
	return total, longest
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
