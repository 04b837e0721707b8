package algo

import "time"

// Charging spends cost whatever the limit: a request admitted at its
// estimate and settled at a higher actual cost (an LLM response longer
// than the prompt suggested) owes the difference. A rate algorithm (GCRA,
// token bucket) goes into debt: it refuses until time has repaid it. A
// window algorithm charges the window the request was admitted in (at),
// which may take its count past the limit until that window ends, and
// charges nothing once that window no longer counts.

// charge adds cost to s at now for a request admitted at at, for every
// algorithm but SlidingLog.
func (p *params) charge(s *state, now, at, cost int64) {
	if cost <= 0 {
		return
	}
	switch p.alg {
	case GCRA:
		s.a = max(s.a, now) + cost*p.emission
	case TokenBucket:
		last, missing := s.a, s.b
		if now > last {
			missing, last = max(missing-(now-last), 0), now
		}
		s.a, s.b = last, missing+cost*p.emission
	case FixedWindow:
		ws := p.windowStart(at)
		if p.windowEnd(ws) <= now {
			return // the window is over
		}
		switch start, used := s.a, s.b; {
		case ws > start || start == 0 && used == 0:
			s.a, s.b = ws, cost
		case ws == start:
			s.b = used + cost
		}
	case SlidingWindow:
		ws := p.epochStart(at)
		if ws+2*p.period <= now {
			return // no longer weighs in the estimate
		}
		start := s.a
		prev, cur := uint64(s.b)>>32, uint64(s.b)&0xffffffff
		switch {
		case ws > start || start == 0 && s.b == 0:
			if cur != 0 && ws == start+p.period {
				prev, cur = cur, 0
			} else {
				prev, cur = 0, 0
			}
			start, cur = ws, satAdd32(cur, cost)
		case ws == start:
			cur = satAdd32(cur, cost)
		case ws == start-p.period:
			prev = satAdd32(prev, cost)
		default:
			return
		}
		s.a, s.b = start, int64(prev<<32|cur)
	}
}

// satAdd32 adds cost to a 32-bit count, saturating.
func satAdd32(n uint64, cost int64) uint64 { return min(n+uint64(cost), 0xffffffff) }

// charge adds cost to the log at t, its newest admission's instant or
// later: into the newest entry when there is one, so that a debt never
// needs more entries than the ring holds.
func (l *slidingLog) charge(t, cost, limit int64) {
	if cost <= 0 {
		return
	}
	if l.n > 0 {
		last := &l.ring[l.index(l.n-1)]
		last.cost += cost
		l.sum += cost
		return
	}
	l.push(max(t, l.seen), cost, limit)
}

// ChargeAt spends cost at now for a request admitted at at, whatever the
// limit (see charge.go): a reservation settled above its estimate.
func (l *Limiter) ChargeAt(now, at time.Time, cost int64) {
	if cost <= 0 {
		return
	}
	ns := now.UnixNano()
	p := l.p.Load()
	switch p.alg {
	case GCRA:
		for {
			tat := l.tat.Load()
			if l.tat.CompareAndSwap(tat, max(tat, ns)+cost*p.emission) {
				return
			}
		}
	case SlidingLog:
		l.mu.Lock()
		l.log.charge(at.UnixNano(), cost, l.p.Load().limit)
		l.mu.Unlock()
	default:
		l.mu.Lock()
		l.p.Load().charge(&l.s, ns, at.UnixNano(), cost)
		l.mu.Unlock()
	}
}

// ChargeHashAt is ChargeAt for a key of the store. A key the store no
// longer holds (swept idle, evicted) or has handed over is not charged.
func (k *Keyed) ChargeHashAt(h Hash, now, at time.Time, cost int64) {
	if cost <= 0 {
		return
	}
	sh := k.shard(h.b)
	sh.mu.Lock()
	if _, handed := sh.handed[h]; !handed && len(sh.t.slots) > 0 {
		if i, found := sh.t.find(h.a, h.b); found {
			s := &sh.t.slots[i].s
			if k.alg == SlidingLog {
				sh.logs[s.a-1].charge(at.UnixNano(), cost, sh.p.limit)
			} else {
				sh.p.charge(s, now.UnixNano(), at.UnixNano(), cost)
			}
		}
	}
	sh.mu.Unlock()
}
