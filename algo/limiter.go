package algo

import (
	"sync"
	"sync/atomic"
	"time"
)

// Limiter enforces one Config for one subject. It is safe for concurrent
// use. GCRA, whose whole state is one timestamp, is lock-free (a
// compare-and-swap loop); the other algorithms hold a mutex for a few
// nanoseconds.
type Limiter struct {
	p   params
	tat atomic.Int64 // GCRA's state

	mu  sync.Mutex
	s   state      // guarded by mu
	log slidingLog // guarded by mu
}

// New returns a Limiter for cfg, or an error naming the invalid field.
func New(cfg Config) (*Limiter, error) {
	p, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	l := &Limiter{p: p}
	if p.alg == SlidingLog && p.limit <= 1024 {
		l.log.ring = make([]logEntry, p.limit)
	}
	return l, nil
}

// Config returns the configuration l enforces.
func (l *Limiter) Config() Config { return l.p.config() }

// Allow is shorthand for AllowAt(time.Now(), cost).
func (l *Limiter) Allow(cost int64) Decision { return l.AllowAt(time.Now(), cost) }

// AllowAt decides a request of the given cost arriving at now, and spends
// the cost if it is admitted. See Decision for what is reported.
func (l *Limiter) AllowAt(now time.Time, cost int64) Decision {
	return l.p.decision(l.allowNanos(now.UnixNano(), cost))
}

func (l *Limiter) allowNanos(now, cost int64) verdict {
	if cost < 0 {
		cost = 0
	}
	switch l.p.alg {
	case GCRA:
		for {
			tat := l.tat.Load()
			next, v := l.p.gcra(tat, now, cost)
			if next == tat || l.tat.CompareAndSwap(tat, next) {
				return v
			}
		}
	case SlidingLog:
		l.mu.Lock()
		v := l.p.slidingLog(&l.log, now, cost)
		l.mu.Unlock()
		return v
	default:
		l.mu.Lock()
		v := l.p.decide(&l.s, now, cost)
		l.mu.Unlock()
		return v
	}
}
