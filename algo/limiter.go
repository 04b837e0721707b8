package algo

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Limiter enforces one Config for one subject. It is safe for concurrent
// use. GCRA, whose whole state is one timestamp, is lock-free (a
// compare-and-swap loop); the other algorithms hold a mutex for a few
// nanoseconds.
type Limiter struct {
	p   atomic.Pointer[params] // replaced whole by Reconfigure
	tat atomic.Int64           // GCRA's state

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
	l := &Limiter{}
	l.p.Store(&p)
	if p.alg == SlidingLog && p.limit <= 1024 {
		l.log.ring = make([]logEntry, p.limit)
	}
	return l, nil
}

// Config returns the configuration l enforces.
func (l *Limiter) Config() Config { return l.p.Load().config() }

// Reconfigure changes the limit l enforces at now. What the subject has
// spent stays spent, and what it may admit at once does not grow with the
// change: it grows afterwards, at the new rate (the token bucket keeps its
// tokens, GCRA its units of burst, the windows their counts). It is how a
// lease that changes a node's share takes effect without handing out a
// reset or a free burst. The algorithm cannot change, and a window's period
// change starts the window afresh.
func (l *Limiter) Reconfigure(cfg Config, now time.Time) error {
	p, err := compile(cfg)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.p.Load()
	if p.alg != old.alg {
		return &ConfigError{"Algorithm", fmt.Sprintf("cannot change from %v to %v; make a new Limiter", old.alg, p.alg)}
	}
	switch p.alg {
	case TokenBucket:
		p.carryOver(&l.s, old, now.UnixNano())
	case GCRA:
		// Admissions update the TAT without the lock: swap, so that one
		// landing meanwhile is carried over rather than lost.
		for {
			tat := l.tat.Load()
			s := state{a: tat}
			p.carryOver(&s, old, now.UnixNano())
			if l.tat.CompareAndSwap(tat, s.a) {
				break
			}
		}
	case FixedWindow, SlidingWindow:
		if p.period != old.period || !sameCalendar(p.cal, old.cal) {
			l.s = state{}
		}
	}
	l.p.Store(&p)
	return nil
}

// Reset returns l to a fresh limiter's state under its configuration:
// what the subject spent is forgotten (an operator's reset of a key).
func (l *Limiter) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tat.Store(0)
	l.s = state{}
	l.log.reset()
}

// Allow is shorthand for AllowAt(time.Now(), cost).
func (l *Limiter) Allow(cost int64) Decision { return l.AllowAt(time.Now(), cost) }

// AllowAt decides a request of the given cost arriving at now, and spends
// the cost if it is admitted. See Decision for what is reported.
func (l *Limiter) AllowAt(now time.Time, cost int64) (d Decision) {
	v, limit := l.allowNanos(now.UnixNano(), cost)
	d.set(v, limit)
	return d
}

// PeekAt answers what AllowAt(now, cost) would, and spends nothing:
// Allowed says whether a request of the given cost would be admitted at
// now, RetryAfter when it would be (Never when it never can), and
// Remaining and ResetAfter are the subject's state as it stands, before
// any spending. A peek of cost 0 (AllowAt's) is always allowed; PeekAt of
// cost 1 is refused while not one unit is left, as a request would be.
// PeekAt with a cost of 0 or less is AllowAt(now, 0).
func (l *Limiter) PeekAt(now time.Time, cost int64) (d Decision) {
	ns := now.UnixNano()
	p := l.p.Load()
	var v verdict
	switch p.alg {
	case GCRA:
		v = p.peek(state{a: l.tat.Load()}, ns, cost)
	case SlidingLog:
		l.mu.Lock()
		p = l.p.Load()
		v = p.slidingLogPeek(&l.log, ns, cost)
		l.mu.Unlock()
	default:
		l.mu.Lock()
		p = l.p.Load()
		v = p.peek(l.s, ns, cost)
		l.mu.Unlock()
	}
	d.set(v, p.maxCost)
	return d
}

// UsedAt is what the subject has spent of its limit at now, as a lease
// holder reports it: for FixedWindow, the window's count. That is Limit −
// Remaining until the limit is lowered below what was spent, as a smaller
// lease does; then Remaining is 0 and UsedAt still says what was spent.
// For the other algorithms it is Limit − Remaining, clipped at the limit:
// their state is an estimate (the sliding window's carries the previous
// window) or a rate, and reported above the lease it would raise the
// division's grants to it (10 sidecars admitted 128% of a sliding-window
// quota in make accuracy).
func (l *Limiter) UsedAt(now time.Time) int64 {
	if p := l.p.Load(); p.alg == FixedWindow {
		l.mu.Lock()
		p, s := l.p.Load(), l.s
		l.mu.Unlock()
		return p.used(s, now.UnixNano())
	}
	d := l.PeekAt(now, 0)
	return d.Limit - d.Remaining
}

// allowNanos decides under one configuration and returns its limit with
// the verdict, so a Reconfigure landing meanwhile cannot mix the two. The
// algorithm never changes, so the unlocked load chooses the branch.
func (l *Limiter) allowNanos(now, cost int64) (verdict, int64) {
	if cost < 0 {
		cost = 0
	}
	p := l.p.Load()
	switch p.alg {
	case GCRA:
		for {
			tat := l.tat.Load()
			next, v := p.gcra(tat, now, cost)
			if next == tat || l.tat.CompareAndSwap(tat, next) {
				return v, p.maxCost
			}
		}
	case SlidingLog:
		l.mu.Lock()
		p = l.p.Load()
		v := p.slidingLog(&l.log, now, cost)
		l.mu.Unlock()
		return v, p.maxCost
	default:
		l.mu.Lock()
		p = l.p.Load()
		v := p.decide(&l.s, now, cost)
		l.mu.Unlock()
		return v, p.maxCost
	}
}

// ReturnAt gives back cost admitted at now, as if that admission had not
// happened: for callers that admit under several limits and must undo one
// when a later limit refuses. Returning more than was admitted never buys
// more than a fresh limiter has.
func (l *Limiter) ReturnAt(now time.Time, cost int64) {
	if cost <= 0 {
		return
	}
	ns := now.UnixNano()
	p := l.p.Load()
	switch p.alg {
	case GCRA:
		l.tat.Add(-cost * p.emission)
	case SlidingLog:
		l.mu.Lock()
		l.log.refund(ns, cost)
		l.mu.Unlock()
	default:
		l.mu.Lock()
		l.p.Load().refund(&l.s, ns, cost)
		l.mu.Unlock()
	}
}
