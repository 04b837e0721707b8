package algo

import (
	"math"
	"time"
)

// state is the fixed-size record every algorithm but SlidingLog keeps per
// subject. Its zero value is a subject that has never been seen, so a fresh
// key needs no initialisation. What a and b mean depends on the algorithm:
//
//	GCRA           a = theoretical arrival time (TAT), ns
//	TokenBucket    a = last refill, ns; b = tokens missing, as ns of refill
//	FixedWindow    a = window start, ns; b = cost admitted in the window
//	SlidingWindow  a = current window start, ns; b = previous<<32 | current
//	SlidingLog     a = 1 + index of the subject's log in its owner's pool
type state struct {
	a, b int64
}

// decide applies one request to s, for every algorithm but SlidingLog.
func (p *params) decide(s *state, now, cost int64) verdict {
	switch p.alg {
	case GCRA:
		var v verdict
		s.a, v = p.gcra(s.a, now, cost)
		return v
	case TokenBucket:
		return p.tokenBucket(s, now, cost)
	case FixedWindow:
		if p.cal != nil {
			return p.calendarWindow(s, now, cost)
		}
		return p.fixedWindow(s, now, cost)
	default:
		return p.slidingWindow(s, now, cost)
	}
}

// peek answers for a request of the given cost against s what decide
// would, spending nothing: allowed and retryAfter as decide says for cost,
// on a copy of s, and remaining and resetAfter as s stands (a peek of
// cost 0). For every algorithm but SlidingLog.
func (p *params) peek(s state, now, cost int64) verdict {
	cur := s
	v := p.decide(&cur, now, 0)
	if cost <= 0 {
		return v
	}
	asked := p.decide(&s, now, cost) // s is a copy: nothing is stored
	return peeked(v, asked)
}

// peeked is the current state's verdict cur with the decision a request
// of some cost was given (asked): what a peek of that cost answers.
func peeked(cur, asked verdict) verdict {
	cur.allowed, cur.retryAfter = asked.allowed, asked.retryAfter
	return cur
}

// restAt returns the instant from which s decides exactly as a fresh state
// would, for every algorithm but SlidingLog. Forgetting s after restAt loses
// nothing.
func (p *params) restAt(s state) int64 {
	switch p.alg {
	case GCRA:
		return s.a
	case TokenBucket:
		return s.a + s.b
	case FixedWindow:
		if s.b == 0 {
			return s.a
		}
		return p.windowEnd(s.a)
	default:
		switch {
		case s.b&0xffffffff != 0:
			return s.a + 2*p.period
		case s.b != 0:
			return s.a + p.period
		}
		return s.a
	}
}

// dur converts a non-negative span of nanoseconds, clamping below at zero.
func dur(ns int64) time.Duration {
	if ns < 0 {
		return 0
	}
	return time.Duration(ns)
}

// floorDiv is integer division rounding towards negative infinity, so that
// windows before the Unix epoch align like those after it.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// windowStart returns the start of the window holding now: aligned to the
// Unix epoch, or to the calendar.
func (p *params) windowStart(now int64) int64 {
	if p.cal != nil {
		return p.cal.start(now)
	}
	return floorDiv(now, p.period) * p.period
}

// epochStart is windowStart for windows aligned to the Unix epoch, which
// every algorithm but a calendar's fixed window counts in: inlined where
// windowStart, which may call the calendar, is not.
func (p *params) epochStart(now int64) int64 { return floorDiv(now, p.period) * p.period }

// windowEnd returns the end of the window starting at start: a period
// later, or the calendar's next window's start.
func (p *params) windowEnd(start int64) int64 {
	if p.cal != nil {
		return p.cal.end(start)
	}
	return start + p.period
}

// used is what a fixed window's subject has spent in the window at now:
// its count, which, unlike limit − remaining, is not clipped at the limit
// when the limit was lowered below it.
func (p *params) used(s state, now int64) int64 {
	if now >= p.windowEnd(s.a) {
		return 0 // the window is over
	}
	return s.b
}

// refund gives back cost admitted at now, for every algorithm but
// SlidingLog: the inverse of an admission, so that a caller admitting under
// several limits can undo one. It never leaves more than a fresh state.
func (p *params) refund(s *state, now, cost int64) {
	switch p.alg {
	case GCRA:
		s.a -= cost * p.emission
	case TokenBucket:
		s.b = max(s.b-cost*p.emission, 0)
	case FixedWindow:
		// An admission at now was counted in the stored window unless that
		// window has since been left behind.
		if now < p.windowEnd(s.a) {
			s.b = max(s.b-cost, 0)
		}
	case SlidingWindow:
		if now < s.a+p.period {
			cur := int64(uint64(s.b) & 0xffffffff)
			cur = max(cur-cost, 0)
			s.b = int64(uint64(s.b)&^0xffffffff | uint64(cur))
		}
	}
}

// carryOver adapts a state kept under old to p at now so that the capacity
// available at now does not grow with the change: it grows afterwards, at
// the new rate. A token bucket keeps the tokens it holds (capped at its new
// capacity); GCRA moves its TAT so the units it may admit at once stay the
// same. So a node whose share rises is not handed a burst it has not
// waited for, and one whose share falls keeps what it has spent. Window
// algorithms keep their counts: a window's count is absolute.
func (p *params) carryOver(s *state, old *params, now int64) {
	switch p.alg {
	case TokenBucket:
		missing := s.b
		if now > s.a {
			missing = max(missing-(now-s.a), 0)
		}
		tokens := float64(old.maxCost) - float64(missing)/float64(old.emission)
		lack := max(float64(p.maxCost)-tokens, 0)
		s.a, s.b = max(now, s.a), min(int64(lack*float64(p.emission)), p.maxCost*p.emission)
	case GCRA:
		// In units, not time: a TAT left where it was when the rate rose
		// kept the limiter waiting out its old, slower emission interval.
		// A lease changing at every report then cost a global GCRA rule 6%
		// of its limit in the simulator (issue 11).
		base := max(s.a, now)
		avail := float64(old.tau+old.emission-(base-now)) / float64(old.emission)
		s.a = now + p.tau + p.emission - int64(math.Floor(avail*float64(p.emission)))
	}
}
