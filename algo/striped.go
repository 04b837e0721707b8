package algo

import (
	"sync"
	"sync/atomic"
	"time"
)

// Striped is a Limiter that many goroutines share without queueing on its
// one lock: the seed's hot key. Its stripes take units from the limiter in
// chunks and admit from them, each under its own lock, so that while the
// limiter is far from empty a request costs one uncontended lock and one
// limiter call in Chunk requests. Units move only from the limiter to the
// stripes and are never made: Striped admits at most what the limiter
// alone would, plus the units held in stripes (at most Stripes×Chunk) when
// a burst comes on top of a full limiter; and, when the limiter is empty,
// a refusal first brings every stripe's units back, so it refuses only
// when the limiter alone would have (within the window a stripe's units
// are valid in, see below).
//
// Near its limit (less than half of Limit remaining) a Striped is exact:
// the stripes give back what they hold, and every request goes to the
// limiter, which sees each cost, Remaining and RetryAfter as if it were
// alone. Callers that shed by priority or lend by
// how full the limit is (the agent's priority reserves and borrowing) rely
// on that: far from the limit, Remaining is the limiter's as of the
// stripe's last chunk, which is always over half of Limit.
//
// Only the rate algorithms (TokenBucket, GCRA) are striped: a window's
// units belong to their window, and units taken in one and spent in the
// next would be counted against the wrong one. A Striped of a window
// algorithm is exact.
type Striped struct {
	lim     *Limiter
	chunk   atomic.Int64 // units a stripe takes at once; below 2, exact
	stripes []stripe
	// empty is until when (ns) the limiter has not one unit, as its last
	// refusal of one unit said: until then requests of one unit are
	// refused with one atomic load, not a lock, so a saturated limit
	// costs its refusals nothing. 0 when not known empty. resetAt goes
	// with it.
	empty, resetAt atomic.Int64
	turn           atomic.Uint32 // the next stripe to try
	// low is set while the limiter is under half full: requests go
	// straight to it, without trying a stripe first.
	low atomic.Bool
}

// stripe is one share of the units taken, padded to its own cache lines
// so that stripes used from different cores do not share one.
type stripe struct {
	mu        sync.Mutex
	credit    atomic.Int64 // units taken from the limiter, not yet admitted; written under mu
	remaining int64        // the limiter's Remaining when the credit was taken
	limit     int64
	reset     time.Duration
	_         [64]byte
}

// NewStriped shares lim among stripes stripes, each taking chunk units at
// a time. A chunk below 2, fewer than 2 stripes or a window algorithm make
// it exact: every request goes to lim, as if it were used alone.
func NewStriped(lim *Limiter, stripes int, chunk int64) *Striped {
	s := &Striped{lim: lim}
	if stripes >= 2 && !lim.p.Load().alg.Windowed() {
		s.stripes = make([]stripe, stripes)
	}
	s.chunk.Store(chunk)
	return s
}

// SetChunk changes how many units a stripe takes at once, as the
// limiter's configuration changes; below 2 the Striped is exact (what
// stripes hold is brought back by the next refusal).
func (s *Striped) SetChunk(chunk int64) { s.chunk.Store(chunk) }

// Stripes returns the number of stripes; 0 when exact.
func (s *Striped) Stripes() int { return len(s.stripes) }

// Limiter returns the limiter the stripes take from, for Reconfigure and
// Config.
func (s *Striped) Limiter() *Limiter { return s.lim }

// Held returns the units held in stripes.
func (s *Striped) Held() int64 {
	var n int64
	for i := range s.stripes {
		n += s.stripes[i].credit.Load()
	}
	return n
}

// AllowAt decides a request of the given cost at now, as Limiter.AllowAt.
func (s *Striped) AllowAt(now time.Time, cost int64) Decision {
	// What empty knows is when one unit comes back: it answers requests
	// of one. A larger cost waits longer, or can never be admitted, as
	// the limiter says.
	if e := s.empty.Load(); e != 0 && cost == 1 {
		if ns := now.UnixNano(); ns < e {
			return Decision{Limit: s.lim.p.Load().maxCost, RetryAfter: time.Duration(e - ns), ResetAfter: time.Duration(max(s.resetAt.Load()-ns, e-ns))}
		}
	}
	chunk := s.chunk.Load()
	if s.stripes == nil || cost <= 0 || cost >= chunk || s.low.Load() {
		return s.exact(now, cost)
	}
	st := s.pick()
	if st.credit.Load() >= cost {
		st.credit.Add(-cost)
		d := Decision{Allowed: true, Limit: st.limit, Remaining: st.remaining, ResetAfter: st.reset}
		st.mu.Unlock()
		return d
	}
	// Out of credit: take the next chunk (this request's cost included)
	// while the limiter stays over half full; otherwise this request goes
	// to the limiter alone.
	d := s.lim.AllowAt(now, chunk)
	if !d.Allowed || 2*d.Remaining < d.Limit {
		if d.Allowed {
			s.giveBack(now, chunk)
		}
		st.mu.Unlock()
		// Under half full the limiter decides alone, and exactly: what
		// the stripes hold goes back to it.
		s.low.Store(true)
		s.reclaim(now)
		return s.exact(now, cost)
	}
	st.credit.Add(chunk - cost)
	st.remaining, st.limit, st.reset = d.Remaining, d.Limit, d.ResetAfter
	st.mu.Unlock()
	d.Remaining += chunk - cost // what this request leaves, the chunk's rest counted
	return d
}

// PeekAt answers what AllowAt(now, cost) would, spending nothing, as
// Limiter.PeekAt: the units the stripes hold count as remaining, and a
// request they could admit (or that bringing them back would let the
// limiter admit) is admitted.
func (s *Striped) PeekAt(now time.Time, cost int64) Decision {
	d := s.lim.PeekAt(now, cost)
	if held := s.Held(); held > 0 {
		if !d.Allowed && d.RetryAfter >= 0 && cost <= d.Remaining+held {
			d.Allowed, d.RetryAfter = true, 0
		}
		d.Remaining = min(d.Remaining+held, d.Limit)
	}
	return d
}

// exact decides at the limiter. A refusal brings the stripes' units back
// first and asks again, so that units held in stripes never make a
// request be refused that the limiter alone would admit. A peek (cost 0)
// counts the stripes' units as remaining.
func (s *Striped) exact(now time.Time, cost int64) Decision {
	d := s.lim.AllowAt(now, cost)
	if cost <= 0 {
		d.Remaining = min(d.Remaining+s.Held(), d.Limit)
		return d
	}
	if !d.Allowed && s.stripes != nil && s.reclaim(now) {
		d = s.lim.AllowAt(now, cost)
	}
	if s.stripes != nil && d.Allowed && 2*d.Remaining >= d.Limit && s.low.Load() {
		s.low.Store(false)
	}
	if !d.Allowed && cost == 1 && d.RetryAfter > 0 {
		ns := now.UnixNano()
		s.resetAt.Store(ns + int64(d.ResetAfter))
		e := ns + int64(d.RetryAfter)
		s.empty.Store(e)
		// Units given back between the refusal and the store above
		// (giveBack clears empty first) would be refused until e: look
		// again. A giveBack after this look clears empty itself.
		if s.lim.PeekAt(now, 1).Allowed {
			s.empty.CompareAndSwap(e, 0)
		}
	}
	return d
}

// reclaim gives the stripes' units back to the limiter, and reports
// whether there were any. Every stripe is locked, even one that shows no
// credit: a goroutine holding it may have taken a chunk from the limiter
// (the refusal that brought us here) and not yet credited it, and those
// units, skipped, stayed in the stripe while every request was refused
// as the limiter's "empty" said (TestStripedConcurrentExact: 4,985 of
// 5,000 admitted in about 1% of runs).
func (s *Striped) reclaim(now time.Time) bool {
	var back int64
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		back += st.credit.Swap(0)
		st.mu.Unlock()
	}
	if back > 0 {
		s.giveBack(now, back)
	}
	return back > 0
}

// giveBack returns units to the limiter, which is no longer empty.
func (s *Striped) giveBack(now time.Time, n int64) {
	s.lim.ReturnAt(now, n)
	s.empty.Store(0)
}

// ReturnAt gives back cost admitted at now, as Limiter.ReturnAt: to a
// stripe when it has credit (so the limiter's lock is not taken), to the
// limiter otherwise.
func (s *Striped) ReturnAt(now time.Time, cost int64) {
	if cost <= 0 {
		return
	}
	if s.stripes == nil || cost >= s.chunk.Load() || s.low.Load() {
		s.giveBack(now, cost)
		return
	}
	st := s.pick()
	if st.credit.Load() > 0 {
		st.credit.Add(cost)
		st.mu.Unlock()
		return
	}
	st.mu.Unlock()
	s.giveBack(now, cost)
}

// Reconfigure changes the limiter's configuration as Limiter.Reconfigure;
// the units in stripes stay theirs (they were taken under the old one).
func (s *Striped) Reconfigure(cfg Config, now time.Time) error {
	err := s.lim.Reconfigure(cfg, now)
	s.empty.Store(0)
	return err
}

// pick locks a stripe: the next in turn, or the next free one after it,
// so that goroutines on different cores rarely meet on one lock. The turn
// is a counter, not a random draw, so that one goroutine's decisions are
// the same on every run (the simulator's runs are byte-identical).
func (s *Striped) pick() *stripe {
	n := uint32(len(s.stripes))
	i := s.turn.Add(1) % n
	for range n {
		st := &s.stripes[i]
		if st.mu.TryLock() {
			return st
		}
		if i++; i == n {
			i = 0
		}
	}
	st := &s.stripes[i]
	st.mu.Lock()
	return st
}
