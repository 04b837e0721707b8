package algo

import (
	"math"
	"math/bits"
	"time"
)

// slidingWindow decides a request with the sliding window counter. It keeps
// the current epoch-aligned window's count and the previous one's, and
// estimates the trailing window as
//
//	estimate = previous × (Period − elapsed)/Period + current
//
// where elapsed is the time since the current window started. At 10:01:15
// with a 60 s window, previous 80 and current 30, the estimate is
// 80 × 0.75 + 30 = 90: under a limit of 100, a request is allowed.
//
// The arithmetic is exact: a request of cost n is admitted when
// ⌈previous × (Period − elapsed) / Period⌉ + current + n ≤ Limit, computed in
// 128 bits, which is the same test as estimate + n ≤ Limit because the right
// side is an integer. With a Slack the estimate may reach Limit + Slack,
// but current + n must stay within Limit: the aligned window's count is
// bounded whatever the slack.
func (p *params) slidingWindow(s *state, now, cost int64) verdict {
	start := s.a
	prev, cur := uint64(s.b)>>32, uint64(s.b)&0xffffffff
	if now >= start+p.period || (start == 0 && s.b == 0) {
		if ws := p.epochStart(now); ws > start || (start == 0 && s.b == 0) {
			if cur != 0 && ws == start+p.period {
				prev, cur = cur, 0
			} else {
				prev, cur = 0, 0
			}
			start = ws
		}
	}
	elapsed := min(max(now-start, 0), p.period)
	weighted := int64(p.weight(prev, uint64(p.period-elapsed)))

	// fits says whether n more fit now: in the estimate, and in the
	// aligned window's count.
	fits := func(n int64) bool {
		return weighted+int64(cur)+n <= p.limit+p.slack && int64(cur)+n <= p.limit
	}
	var v verdict
	switch {
	case cost > p.limit:
		v.retryAfter = Never
	case !fits(cost):
		v.retryAfter = p.slidingWindowWait(start, prev, cur, cost, now)
	default:
		v.allowed = true
		if cost == 0 {
			if !fits(1) {
				v.retryAfter = p.slidingWindowWait(start, prev, cur, 1, now)
			}
			break
		}
		cur += uint64(cost)
		s.a, s.b = start, int64(prev<<32|cur)
	}
	v.remaining = max(min(p.limit-int64(cur), p.limit+p.slack-int64(cur)-weighted), 0)
	switch {
	case cur != 0:
		v.resetAfter = dur(start + 2*p.period - now)
	case prev != 0:
		v.resetAfter = dur(start + p.period - now)
	}
	return v
}

// slidingWindowWait returns how long until a request of the given cost fits,
// given the window starting at start with counts prev and cur.
func (p *params) slidingWindowWait(start int64, prev, cur uint64, cost, now int64) time.Duration {
	period := uint64(p.period)
	if int64(cur)+cost <= p.limit {
		// Still in this window: wait until previous×(P−e)/P ≤ room, that is
		// e ≥ P − ⌊room·P/previous⌋. The estimate is what refused, so
		// room < previous here, and the quotient is below P.
		room := p.limit + p.slack - int64(cur) - cost
		e := period - mulDiv(uint64(room), period, prev)
		return dur(start + int64(e) - now)
	}
	// Only the next window helps: there previous' = cur and current' = 0,
	// so wait until cur×(P−e)/P ≤ Limit + Slack − cost; at once when the
	// slack covers cur already.
	room := uint64(p.limit + p.slack - cost)
	if room >= cur {
		return dur(start + p.period - now)
	}
	e := period - mulDiv(room, period, cur)
	return dur(start + p.period + int64(e) - now)
}

// mulDiv returns ⌊a·b/c⌋ for a 128-bit product whose quotient fits in 64 bits.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// weight returns ⌈prev·left/Period⌉ exactly, for left ≤ Period: the
// previous window's count weighted by the part of it still overlapping. A
// floating-point estimate lands within one of the answer, and two 128-bit
// products check and correct it, which costs far less than a 128-bit
// division.
func (p *params) weight(prev, left uint64) uint64 {
	if prev == 0 || left == 0 {
		return 0
	}
	q := uint64(math.Ceil(float64(prev) * float64(left) * p.invPeriod))
	period := uint64(p.period)
	nHi, nLo := bits.Mul64(prev, left)
	// Raise q until q·P ≥ n, then lower it while (q−1)·P ≥ n.
	for {
		hi, lo := bits.Mul64(q, period)
		if hi > nHi || (hi == nHi && lo >= nLo) {
			break
		}
		q++
	}
	for q > 0 {
		hi, lo := bits.Mul64(q-1, period)
		if hi < nHi || (hi == nHi && lo < nLo) {
			break
		}
		q--
	}
	return q
}
