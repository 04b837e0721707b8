package algo

import "time"

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
		return p.fixedWindow(s, now, cost)
	default:
		return p.slidingWindow(s, now, cost)
	}
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
		return s.a + p.period
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

// windowStart returns the start of the epoch-aligned window holding now.
func (p *params) windowStart(now int64) int64 { return floorDiv(now, p.period) * p.period }
