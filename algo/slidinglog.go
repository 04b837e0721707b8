package algo

import "time"

// logEntry is one admission in a sliding log: its instant and its cost.
// Admissions at the same instant share one entry.
type logEntry struct {
	at, cost int64
}

// slidingLog is the exact sliding window: a ring of the admissions inside
// the trailing Period, oldest first. It holds at most Limit entries (every
// entry has cost ≥ 1 and their sum never exceeds Limit), so its memory is
// 16 bytes × Limit at worst: exact, and rarely affordable for large limits.
type slidingLog struct {
	ring []logEntry
	head int   // index of the oldest entry
	n    int   // entries in use
	sum  int64 // total cost of the entries in use
	seen int64 // latest instant the log has been judged at
}

// slidingLog decides a request against l: admitted when the cost already
// admitted in (now − Period, now] plus this cost is at most Limit. An instant
// before the latest one the log has been judged at is treated as that one, so
// time moving backwards never brings back capacity.
func (p *params) slidingLog(l *slidingLog, now, cost int64) verdict {
	t := max(now, l.seen)
	l.seen = t
	for l.n > 0 && l.ring[l.head].at+p.period <= t {
		l.sum -= l.ring[l.head].cost
		l.head = l.index(1)
		l.n--
	}
	var v verdict
	switch {
	case cost > p.limit:
		v.retryAfter = Never
	case l.sum+cost > p.limit:
		v.retryAfter = p.slidingLogWait(l, cost, now)
	default:
		v.allowed = true
		if cost == 0 {
			if l.sum >= p.limit {
				v.retryAfter = p.slidingLogWait(l, 1, now)
			}
			break
		}
		l.push(t, cost, p.limit)
	}
	v.remaining = p.limit - l.sum
	if l.n > 0 {
		v.resetAfter = dur(l.newestAt() + p.period - now)
	}
	return v
}

// slidingLogPeek answers for a request of the given cost what slidingLog
// would, spending nothing (see params.peek). Like a peek of cost 0 it
// drops the admissions that have left the window, which a decision at now
// drops too.
func (p *params) slidingLogPeek(l *slidingLog, now, cost int64) verdict {
	v := p.slidingLog(l, now, 0)
	switch {
	case cost <= 0:
	case cost > p.limit:
		v.allowed, v.retryAfter = false, Never
	case l.sum+cost > p.limit:
		v.allowed, v.retryAfter = false, p.slidingLogWait(l, cost, now)
	default:
		v.allowed, v.retryAfter = true, 0
	}
	return v
}

// slidingLogWait returns how long until enough of the oldest admissions have
// left the window for a request of the given cost to fit.
func (p *params) slidingLogWait(l *slidingLog, cost, now int64) time.Duration {
	freed := int64(0)
	for i := 0; i < l.n; i++ {
		e := l.ring[l.index(i)]
		freed += e.cost
		if l.sum-freed+cost <= p.limit {
			return dur(e.at + p.period - now)
		}
	}
	return 0 // unreachable while cost ≤ Limit: freeing every entry makes room
}

// push appends an admission at t, merging it with the newest entry when they
// share an instant. The ring grows by doubling up to limit entries.
func (l *slidingLog) push(t, cost, limit int64) {
	l.sum += cost
	if l.n > 0 {
		last := &l.ring[l.index(l.n-1)]
		if last.at == t {
			last.cost += cost
			return
		}
	}
	if l.n == len(l.ring) {
		l.grow(limit)
	}
	l.ring[l.index(l.n)] = logEntry{at: t, cost: cost}
	l.n++
}

func (l *slidingLog) grow(limit int64) {
	size := int64(max(2*len(l.ring), 4))
	size = min(size, limit)
	ring := make([]logEntry, size)
	for i := 0; i < l.n; i++ {
		ring[i] = l.ring[l.index(i)]
	}
	l.ring, l.head = ring, 0
}

// newestAt is the instant of the newest admission; l must not be empty.
func (l *slidingLog) newestAt() int64 { return l.ring[l.index(l.n-1)].at }

// index returns the ring position of the i-th entry from the oldest, for
// 0 ≤ i ≤ len(ring), without a division.
func (l *slidingLog) index(i int) int {
	j := l.head + i
	if j >= len(l.ring) {
		j -= len(l.ring)
	}
	return j
}

// restAt is the instant from which l holds nothing.
func (l *slidingLog) restAt(p *params) int64 {
	if l.n == 0 {
		return 0
	}
	return l.newestAt() + p.period
}

// reset empties l, keeping its ring for reuse.
func (l *slidingLog) reset() {
	l.head, l.n, l.sum, l.seen = 0, 0, 0, 0
}

// refund removes cost from the newest admission, if the log still holds it.
func (l *slidingLog) refund(now, cost int64) {
	if l.n == 0 {
		return
	}
	last := &l.ring[l.index(l.n-1)]
	if last.at != max(now, l.seen) && last.at != now {
		return
	}
	take := min(cost, last.cost)
	last.cost -= take
	l.sum -= take
	if last.cost == 0 {
		l.n--
	}
}
