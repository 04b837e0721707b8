package algo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrExceedsLimit is returned by Concurrency.Acquire for a cost larger than
// the limit: it could never be admitted, so waiting would never end.
var ErrExceedsLimit = errors.New("algo: cost exceeds the concurrency limit")

// Concurrency caps the cost in flight at once against one dependency,
// whatever the arrival rate: the service-level limit the design prefers,
// because it adjusts by itself to what each request really costs (Little's
// law: in flight = throughput × latency).
//
// TryAcquire never waits and takes no lock; Acquire waits in FIFO order
// until its cost fits or its context ends. A cost is returned with Release.
// The limit may be changed at any time (SetLimit), which is how adaptive
// controllers drive it. It is safe for concurrent use.
type Concurrency struct {
	limit    atomic.Int64
	inFlight atomic.Int64
	waiting  atomic.Int64 // len(waiters), readable without mu

	mu      sync.Mutex
	waiters []*waiter // FIFO, guarded by mu
}

type waiter struct {
	cost  int64
	ready chan struct{} // closed once the cost has been acquired for it
}

// NewConcurrency returns a limiter admitting at most limit cost in flight.
func NewConcurrency(limit int64) (*Concurrency, error) {
	if limit <= 0 {
		return nil, &ConfigError{"Limit", fmt.Sprintf("must be positive, got %d", limit)}
	}
	c := &Concurrency{}
	c.limit.Store(limit)
	return c, nil
}

// Limit returns the current limit.
func (c *Concurrency) Limit() int64 { return c.limit.Load() }

// InFlight returns the cost currently acquired and not yet released.
func (c *Concurrency) InFlight() int64 { return c.inFlight.Load() }

// Waiting returns how many Acquire calls are waiting.
func (c *Concurrency) Waiting() int { return int(c.waiting.Load()) }

// TryAcquire takes cost if it fits now and nobody is waiting ahead of it.
func (c *Concurrency) TryAcquire(cost int64) bool {
	if cost < 0 {
		return false
	}
	if c.waiting.Load() > 0 {
		return false // do not overtake waiters
	}
	return c.take(cost)
}

// take adds cost to the in-flight total if it stays within the limit.
func (c *Concurrency) take(cost int64) bool {
	for {
		n := c.inFlight.Load()
		if n+cost > c.limit.Load() {
			return false
		}
		if c.inFlight.CompareAndSwap(n, n+cost) {
			return true
		}
	}
}

// Acquire takes cost, waiting in FIFO order until it fits. It returns
// ctx.Err() if the context ends first, having taken nothing, and
// ErrExceedsLimit at once if cost is larger than the limit.
func (c *Concurrency) Acquire(ctx context.Context, cost int64) error {
	if cost < 0 {
		return fmt.Errorf("algo: negative cost %d", cost)
	}
	if cost > c.limit.Load() {
		return fmt.Errorf("%w: cost %d, limit %d", ErrExceedsLimit, cost, c.limit.Load())
	}
	if c.TryAcquire(cost) {
		return nil
	}
	c.mu.Lock()
	w := &waiter{cost: cost, ready: make(chan struct{})}
	c.waiters = append(c.waiters, w)
	c.waiting.Add(1)
	// A Release may have run between TryAcquire and registering; make sure
	// its capacity is not missed.
	c.grantLocked()
	c.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		select {
		case <-w.ready:
			// Granted while the context ended: give it back.
			c.mu.Unlock()
			c.Release(cost)
		default:
			c.removeLocked(w)
			c.grantLocked() // w may have been blocking smaller waiters
			c.mu.Unlock()
		}
		return ctx.Err()
	}
}

// Release returns cost taken by TryAcquire or Acquire.
func (c *Concurrency) Release(cost int64) {
	if n := c.inFlight.Add(-cost); n < 0 {
		panic(fmt.Sprintf("algo: Concurrency released more than was acquired (in flight %d)", n))
	}
	if c.waiting.Load() > 0 {
		c.mu.Lock()
		c.grantLocked()
		c.mu.Unlock()
	}
}

// SetLimit changes the limit. Cost already in flight is not revoked: a
// lower limit takes effect as requests finish.
func (c *Concurrency) SetLimit(limit int64) {
	if limit <= 0 {
		limit = 1
	}
	c.limit.Store(limit)
	if c.waiting.Load() > 0 {
		c.mu.Lock()
		c.grantLocked()
		c.mu.Unlock()
	}
}

// grantLocked admits waiters from the front of the queue while they fit.
func (c *Concurrency) grantLocked() {
	for len(c.waiters) > 0 {
		w := c.waiters[0]
		if !c.take(w.cost) {
			return
		}
		c.waiters[0] = nil
		c.waiters = c.waiters[1:]
		c.waiting.Add(-1)
		close(w.ready)
	}
}

func (c *Concurrency) removeLocked(w *waiter) {
	for i, x := range c.waiters {
		if x == w {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			c.waiting.Add(-1)
			return
		}
	}
}
