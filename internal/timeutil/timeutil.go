// Package timeutil is where Allot's time comes from: a TimeSource tells the
// time and makes timers and tickers on it. System is the system clock;
// Manual is a clock tests move by hand (Advance), whose timers and tickers
// fire when it passes their time, so that background loops (an agent's
// reports, a leader's rounds) run in virtual time, without sleeps.
// CockroachDB's timeutil.TimeSource and ManualTime are the model.
package timeutil

import (
	"time"
)

// TimeSource tells the time and makes timers and tickers that follow it.
type TimeSource interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
}

// Timer is a time.Timer on a TimeSource.
type Timer interface {
	// C delivers the time the timer fired at.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
	// Reset makes the timer fire d from now; it reports whether the timer
	// was active.
	Reset(d time.Duration) bool
}

// Ticker is a time.Ticker on a TimeSource.
type Ticker interface {
	// C delivers the times of the ticks; a tick not received by the next
	// is dropped, as time.Ticker drops them.
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// System is the system clock.
type System struct{}

// Now is time.Now.
func (System) Now() time.Time { return time.Now() }

// NewTimer is time.NewTimer.
func (System) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

// NewTicker is time.NewTicker.
func (System) NewTicker(d time.Duration) Ticker { return sysTicker{time.NewTicker(d)} }

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time        { return s.t.C }
func (s sysTimer) Stop() bool                 { return s.t.Stop() }
func (s sysTimer) Reset(d time.Duration) bool { return s.t.Reset(d) }

type sysTicker struct{ t *time.Ticker }

func (s sysTicker) C() <-chan time.Time   { return s.t.C }
func (s sysTicker) Stop()                 { s.t.Stop() }
func (s sysTicker) Reset(d time.Duration) { s.t.Reset(d) }

// Or returns src, or System when src is nil.
func Or(src TimeSource) TimeSource {
	if src == nil {
		return System{}
	}
	return src
}

// Sources reports whether v, a clock that tells the time, also makes
// timers, and returns it as a TimeSource; System otherwise. It is for
// configurations that take a Now-only clock from embedders and use its
// timers when it has them (a Manual in tests).
func Sources(v interface{ Now() time.Time }) TimeSource {
	if ts, ok := v.(TimeSource); ok {
		return ts
	}
	return System{}
}
