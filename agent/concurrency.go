package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/allot-io/allot/algo"
)

// Concurrency caps the requests in flight against one dependency: the
// service-level limit, which adjusts to what requests really cost where a
// rate limit cannot. The limit is fixed, or adaptive: AIMD (grow by one
// while used, ×0.9 on a drop) or Gradient2 (follow the ratio of long- to
// short-term latency), as in Netflix's concurrency-limits.
//
//	c, _ := agent.NewConcurrency(agent.ConcurrencyConfig{Limit: 64, Adaptive: agent.AIMD})
//	p, err := c.Acquire(ctx)
//	if err != nil { ... } // context ended while waiting
//	resp, err := callDependency()
//	p.Release(err != nil) // a failure counts as a drop for the adaptive limit
type Concurrency struct {
	fixed    *algo.Concurrency
	adaptive *algo.Adaptive
	now      func() time.Time
}

// Adaptation chooses how a concurrency limit adapts.
type Adaptation uint8

const (
	// Fixed keeps the configured limit.
	Fixed Adaptation = iota
	// AIMD adds one while the limit is used and multiplies by 0.9 on a
	// drop.
	AIMD
	// Gradient2 follows Netflix's gradient of long- to short-term latency.
	Gradient2
)

// ConcurrencyConfig configures a Concurrency.
type ConcurrencyConfig struct {
	// Limit is the fixed limit, or the adaptive one's starting point.
	Limit int64
	// Min and Max bound an adaptive limit (defaults 1 and 10 × Limit).
	Min, Max int64
	Adaptive Adaptation
	// Now is the clock for latency samples; nil means time.Now.
	Now func() time.Time
}

// NewConcurrency returns a concurrency limit.
func NewConcurrency(cfg ConcurrencyConfig) (*Concurrency, error) {
	if cfg.Limit <= 0 {
		return nil, fmt.Errorf("%w: Limit: must be positive, got %d", ErrInvalidConfig, cfg.Limit)
	}
	c := &Concurrency{now: cfg.Now}
	if c.now == nil {
		c.now = time.Now
	}
	lo, hi := cfg.Min, cfg.Max
	if lo == 0 {
		lo = 1
	}
	if hi == 0 {
		hi = 10 * cfg.Limit
	}
	var ctl algo.LimitController
	var err error
	switch cfg.Adaptive {
	case Fixed:
		c.fixed, err = algo.NewConcurrency(cfg.Limit)
		return c, err
	case AIMD:
		ctl, err = algo.NewAIMD(algo.AIMDConfig{Initial: cfg.Limit, Min: lo, Max: hi})
	case Gradient2:
		var g *algo.Gradient2
		if g, err = algo.NewGradient2(algo.Gradient2Config{Initial: cfg.Limit, Min: lo, Max: hi}); err == nil {
			ctl, err = algo.NewWindowed(g, algo.WindowConfig{})
		}
	default:
		return nil, fmt.Errorf("%w: Adaptive: unknown adaptation %d", ErrInvalidConfig, cfg.Adaptive)
	}
	if err != nil {
		return nil, fmt.Errorf("agent: concurrency: %w", err)
	}
	if c.adaptive, err = algo.NewAdaptive(ctl); err != nil {
		return nil, fmt.Errorf("agent: concurrency: %w", err)
	}
	return c, nil
}

// Permit is one request's place in flight; Release it when done.
type Permit struct {
	c      *Concurrency
	flight algo.Flight
}

// Acquire waits for a place in flight, in FIFO order, until ctx ends.
func (c *Concurrency) Acquire(ctx context.Context) (Permit, error) {
	if c.fixed != nil {
		if err := c.fixed.Acquire(ctx, 1); err != nil {
			return Permit{}, err
		}
		return Permit{c: c}, nil
	}
	if err := c.adaptive.Acquire(ctx, 1); err != nil {
		return Permit{}, err
	}
	return Permit{c: c, flight: c.adaptive.Begin(c.now(), 1)}, nil
}

// TryAcquire takes a place in flight if one is free now.
func (c *Concurrency) TryAcquire() (Permit, bool) {
	if c.fixed != nil {
		if !c.fixed.TryAcquire(1) {
			return Permit{}, false
		}
		return Permit{c: c}, true
	}
	f, ok := c.adaptive.TryBegin(c.now(), 1)
	if !ok {
		return Permit{}, false
	}
	return Permit{c: c, flight: f}, true
}

// Release frees the place. dropped tells an adaptive limit that the
// request failed from overload (timed out, or was refused downstream).
func (p Permit) Release(dropped bool) {
	if p.c == nil {
		return
	}
	if p.c.fixed != nil {
		p.c.fixed.Release(1)
		return
	}
	p.c.adaptive.Done(p.c.now(), p.flight, dropped)
}

// Limit is the current limit.
func (c *Concurrency) Limit() int64 {
	if c.fixed != nil {
		return c.fixed.Limit()
	}
	return c.adaptive.Limit()
}

// InFlight is the number of requests in flight.
func (c *Concurrency) InFlight() int64 {
	if c.fixed != nil {
		return c.fixed.InFlight()
	}
	return c.adaptive.InFlight()
}
