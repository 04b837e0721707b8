package main

import (
	"context"
	"sync/atomic"
	"time"
)

// coarseClock is what each agent's default clock is, the system clock
// read every millisecond in the background, shared by every agent of the
// process: a real gateway has one agent and one such ticker, and a
// hundred in one process should not cost a hundred tickers, a hundred
// thousand wake-ups a second, on the machine that also runs the leader.
type coarseClock struct{ ns atomic.Int64 }

func newCoarseClock() *coarseClock {
	c := &coarseClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

// Now is the time as last read.
func (c *coarseClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// run reads the system clock every millisecond until ctx ends.
func (c *coarseClock) run(ctx context.Context) {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.ns.Store(time.Now().UnixNano())
		}
	}
}
