package timeutil

import (
	"slices"
	"sync"
	"time"
)

// Manual is a TimeSource moved by hand. Its time stands still until
// Advance (or Set) moves it; timers and tickers made on it fire when the
// time passes theirs, each on a channel of one, a tick dropped when the
// last is still unread, as the time package's do. It is safe for
// concurrent use.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer // active timers and tickers
}

// NewManual returns a Manual at start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now is the manual time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Advance moves the time forward by d, firing every timer and ticker due
// on the way, in the order of their times.
func (m *Manual) Advance(d time.Duration) { m.Set(m.Now().Add(d)) }

// Set moves the time to t, firing what is due on the way. A time before
// the current one is ignored: a Manual is monotonic, as the clock loops wait on is.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		next := -1
		for i, tm := range m.timers {
			if !tm.at.After(t) && (next < 0 || tm.at.Before(m.timers[next].at)) {
				next = i
			}
		}
		if next < 0 {
			break
		}
		tm := m.timers[next]
		if tm.at.After(m.now) {
			m.now = tm.at
		}
		select {
		case tm.ch <- tm.at:
		default: // the last one is still unread: this one is dropped
		}
		if tm.period > 0 {
			tm.at = tm.at.Add(tm.period)
			for !tm.at.After(m.now) {
				tm.at = tm.at.Add(tm.period)
			}
		} else {
			m.timers = slices.Delete(m.timers, next, next+1)
		}
	}
	if t.After(m.now) || m.now.IsZero() {
		m.now = t
	}
}

// Waiters is the number of active timers and tickers: how a test knows
// that a loop has armed its timer before it moves the time.
func (m *Manual) Waiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

// NewTimer makes a timer that fires d from now.
func (m *Manual) NewTimer(d time.Duration) Timer {
	tm := &manualTimer{m: m, ch: make(chan time.Time, 1)}
	tm.Reset(d)
	return tm
}

// NewTicker makes a ticker that ticks every d from now; d must be
// positive.
func (m *Manual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("timeutil: non-positive interval for NewTicker")
	}
	tm := &manualTimer{m: m, ch: make(chan time.Time, 1), period: d}
	m.mu.Lock()
	tm.at = m.now.Add(d)
	m.timers = append(m.timers, tm)
	m.mu.Unlock()
	return manualTicker{tm}
}

// manualTicker is a Ticker on a Manual.
type manualTicker struct{ *manualTimer }

func (t manualTicker) Stop()                 { t.manualTimer.Stop() }
func (t manualTicker) Reset(d time.Duration) { t.manualTimer.Reset(d) }

// manualTimer is a timer (period 0) or a ticker on a Manual.
type manualTimer struct {
	m      *Manual
	ch     chan time.Time
	at     time.Time
	period time.Duration
}

func (tm *manualTimer) C() <-chan time.Time { return tm.ch }

// Stop removes the timer; it reports whether it was active.
func (tm *manualTimer) Stop() bool {
	m := tm.m
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.Index(m.timers, tm)
	if i < 0 {
		return false
	}
	m.timers = slices.Delete(m.timers, i, i+1)
	return true
}

// Reset makes a timer fire d from now, or a ticker tick every d from now.
func (tm *manualTimer) Reset(d time.Duration) bool {
	m := tm.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if tm.period > 0 {
		if d <= 0 {
			panic("timeutil: non-positive interval for Ticker.Reset")
		}
		tm.period = d
	}
	tm.at = m.now.Add(d)
	active := slices.Contains(m.timers, tm)
	if !active {
		m.timers = append(m.timers, tm)
	}
	if d <= 0 && tm.period == 0 {
		// Due now: fire at once, as a time.Timer of 0 does.
		m.timers = slices.DeleteFunc(m.timers, func(x *manualTimer) bool { return x == tm })
		select {
		case tm.ch <- m.now:
		default:
		}
	}
	return active
}
