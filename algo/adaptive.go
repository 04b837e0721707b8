package algo

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// LimitController turns samples of finished requests into a concurrency
// limit, in the manner of Netflix's concurrency-limits: rather than being
// told what a dependency can take, the limit is discovered from how its
// latency and its failures respond to load. By Little's law the right limit
// is throughput × latency: a dependency serving 2000 requests a second at
// 25 ms wants about 50 in flight. Admitting more only queues them there,
// raising latency without raising throughput; admitting fewer leaves
// capacity unused.
//
// AIMD and Gradient2 implement it. Adaptive binds a controller to a
// Concurrency limiter. Controllers read no clock: every instant is passed
// in. Implementations must be safe for concurrent use.
type LimitController interface {
	// Sample records one finished request and returns the new limit, at
	// least 1. now is when it finished, rtt its round-trip time, inFlight
	// the cost in flight when it started (itself included), and dropped
	// whether it failed for lack of capacity: it timed out, was shed, or
	// the dependency rejected it as overloaded.
	Sample(now time.Time, rtt time.Duration, inFlight int64, dropped bool) int64
	// Limit returns the current limit, at least 1.
	Limit() int64
}

// Defaults and bounds shared by the controllers' configurations.
const (
	defaultInitialLimit = 20  // Netflix's initial limit
	defaultMinLimit     = 1   // the least a Concurrency can hold
	defaultMaxLimit     = 200 // Netflix's maxConcurrency
	// maxAdaptiveLimit keeps every limit exact as a float64, which the
	// controllers use for their multiplications.
	maxAdaptiveLimit = 1 << 53
)

// limitBounds applies the defaults to a controller's Initial, Min and Max
// and validates them: 1 ≤ Min ≤ Initial ≤ Max ≤ 2⁵³. A zero Initial means
// 20, moved into [Min, Max].
func limitBounds(initial, lo, hi int64) (int64, int64, int64, error) {
	if lo < 0 {
		return 0, 0, 0, &ConfigError{"Min", fmt.Sprintf("must not be negative, got %d", lo)}
	}
	if hi < 0 {
		return 0, 0, 0, &ConfigError{"Max", fmt.Sprintf("must not be negative, got %d", hi)}
	}
	if initial < 0 {
		return 0, 0, 0, &ConfigError{"Initial", fmt.Sprintf("must not be negative, got %d", initial)}
	}
	if lo == 0 {
		lo = defaultMinLimit
	}
	if hi == 0 {
		hi = defaultMaxLimit
	}
	if hi > maxAdaptiveLimit {
		return 0, 0, 0, &ConfigError{"Max", fmt.Sprintf("must be at most 2^53, got %d", hi)}
	}
	if lo > hi {
		return 0, 0, 0, &ConfigError{"Min", fmt.Sprintf("%d is above Max %d", lo, hi)}
	}
	if initial == 0 {
		initial = min(max(defaultInitialLimit, lo), hi)
	}
	if initial < lo || initial > hi {
		return 0, 0, 0, &ConfigError{"Initial", fmt.Sprintf("%d is outside [Min, Max] = [%d, %d]", initial, lo, hi)}
	}
	return initial, lo, hi, nil
}

// validFraction reports whether f is a number in (0, 1), or (0, 1] when
// one is allowed. NaN is not.
func validFraction(f float64, one bool) bool {
	return f > 0 && (f < 1 || one && f == 1)
}

// Adaptive is a Concurrency limiter whose limit a LimitController drives:
// every finished request is a sample, and the limit the controller returns
// becomes the Concurrency's limit at once.
//
// A request brackets its work with Begin (or TryBegin) and Done:
//
//	if err := a.Acquire(ctx, 1); err != nil {
//		return err
//	}
//	f := a.Begin(time.Now(), 1)
//	err := call()
//	a.Done(time.Now(), f, isOverload(err))
//
// The embedded Concurrency's other methods work as they do on their own,
// but a cost taken with Acquire or TryAcquire must be handed back through
// Done or Ignore, not Release, or the controller never learns of it.
// Adaptive reads no clock and allocates nothing per request. It is safe
// for concurrent use.
type Adaptive struct {
	*Concurrency
	ctl LimitController

	// mu orders Sample and SetLimit, so that the limit left in place is
	// the one the controller returned last.
	mu sync.Mutex
}

// Flight is one admitted request, as Begin recorded it for Done.
type Flight struct {
	Start    time.Time // when the request began its work
	Cost     int64     // the cost it acquired
	InFlight int64     // cost in flight just after it was admitted, its own included
}

// NewAdaptive returns a Concurrency limiter starting at ctl.Limit() and
// driven by ctl from then on.
func NewAdaptive(ctl LimitController) (*Adaptive, error) {
	if ctl == nil {
		return nil, &ConfigError{"Controller", "must not be nil"}
	}
	c, err := NewConcurrency(ctl.Limit())
	if err != nil {
		return nil, err
	}
	return &Adaptive{Concurrency: c, ctl: ctl}, nil
}

// Controller returns the controller driving the limit.
func (a *Adaptive) Controller() LimitController { return a.ctl }

// Begin records that a request admitted by Acquire or TryAcquire starts
// its work at now. The in-flight total it reads is a snapshot: requests
// starting and finishing at the same moment may move it by a few.
func (a *Adaptive) Begin(now time.Time, cost int64) Flight {
	return Flight{Start: now, Cost: cost, InFlight: a.InFlight()}
}

// TryBegin is TryAcquire followed by Begin: it takes cost if it fits now,
// without waiting, and reports whether it did.
func (a *Adaptive) TryBegin(now time.Time, cost int64) (Flight, bool) {
	if !a.TryAcquire(cost) {
		return Flight{}, false
	}
	return a.Begin(now, cost), true
}

// Done ends f at now: it samples the controller with rtt = now − f.Start,
// installs the limit it returns, then releases f's cost, so that a lower
// limit already applies to the waiters that release admits. dropped says
// whether the request failed for lack of capacity (see
// LimitController.Sample). Done returns the new limit.
func (a *Adaptive) Done(now time.Time, f Flight, dropped bool) int64 {
	a.mu.Lock()
	limit := a.ctl.Sample(now, now.Sub(f.Start), f.InFlight, dropped)
	a.SetLimit(limit)
	a.mu.Unlock()
	a.Release(f.Cost)
	return limit
}

// Ignore releases f's cost without sampling: for a request whose latency
// says nothing about the dependency, such as one the caller cancelled or
// one that failed validation before reaching it.
func (a *Adaptive) Ignore(f Flight) { a.Release(f.Cost) }

// clampLimit returns x limited to [lo, hi], with NaN as lo.
func clampLimit(x, lo, hi float64) float64 {
	if !(x >= lo) { // also NaN
		return lo
	}
	return math.Min(x, hi)
}

// WindowConfig configures a Windowed controller. Zero fields take the
// defaults given, which are Netflix's WindowedLimit's.
type WindowConfig struct {
	// MinSamples is how many samples a window needs to count; a window
	// closing with fewer is discarded, so that a trickle of requests (a
	// health check alone, say) cannot move the limit. Zero means 10.
	MinSamples int
	// MinDuration and MaxDuration bound a window's length, which is
	// otherwise twice the smallest RTT of the window before. Zero means 1s
	// for MinDuration, and the larger of 1s and MinDuration for
	// MaxDuration.
	MinDuration time.Duration
	MaxDuration time.Duration
}

// Defaults of WindowConfig.
const (
	defaultWindowSamples  = 10
	defaultWindowDuration = time.Second
)

// Windowed feeds another controller one aggregate sample per window of
// time instead of one per request, as Netflix's WindowedLimit does: the
// window's mean RTT, its largest in-flight count, and whether any of its
// requests was dropped.
//
// Per-request samples change the limit many times per round trip, while
// the effect of a change is only seen a round trip later; a window about
// two round trips long lets each change show its effect before the next.
// A window closes at the first sample that ends after it; its successor
// lasts twice the smallest RTT seen in it, within [MinDuration,
// MaxDuration]. Between windows Sample returns the wrapped controller's
// Limit unchanged.
//
// Windowed is safe for concurrent use.
type Windowed struct {
	ctl        LimitController
	minSamples int
	minDur     int64 // ns
	maxDur     int64 // ns

	mu          sync.Mutex
	open        bool  // whether a window is open, ending at end
	end         int64 // UnixNano
	n           int
	sum         float64 // ns
	minRTT      int64   // ns
	maxInFlight int64
	dropped     bool
}

// NewWindowed returns ctl fed by windows of samples, or a *ConfigError
// naming the first invalid field of cfg.
func NewWindowed(ctl LimitController, cfg WindowConfig) (*Windowed, error) {
	if ctl == nil {
		return nil, &ConfigError{"Controller", "must not be nil"}
	}
	minSamples := cfg.MinSamples
	if minSamples == 0 {
		minSamples = defaultWindowSamples
	}
	if minSamples < 0 {
		return nil, &ConfigError{"MinSamples", fmt.Sprintf("must not be negative, got %d", cfg.MinSamples)}
	}
	minDur := cfg.MinDuration
	if minDur == 0 {
		minDur = defaultWindowDuration
	}
	if minDur < 0 {
		return nil, &ConfigError{"MinDuration", fmt.Sprintf("must not be negative, got %v", cfg.MinDuration)}
	}
	maxDur := cfg.MaxDuration
	if maxDur == 0 {
		maxDur = max(defaultWindowDuration, minDur)
	}
	if maxDur < minDur || maxDur > maxPeriod {
		return nil, &ConfigError{"MaxDuration", fmt.Sprintf("must be in [MinDuration, %v] = [%v, %v], got %v", maxPeriod, minDur, maxPeriod, cfg.MaxDuration)}
	}
	return &Windowed{ctl: ctl, minSamples: minSamples, minDur: int64(minDur), maxDur: int64(maxDur), minRTT: math.MaxInt64}, nil
}

// Limit returns the wrapped controller's limit.
func (w *Windowed) Limit() int64 { return w.ctl.Limit() }

// Sample adds one finished request to the current window. If the request
// ended after the window, the window closes and, if it holds MinSamples
// samples, is passed to the wrapped controller as one sample at now.
// Sample returns the wrapped controller's limit.
func (w *Windowed) Sample(now time.Time, rtt time.Duration, inFlight int64, dropped bool) int64 {
	rtt = max(rtt, 0)
	t := now.UnixNano()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	w.sum += float64(rtt)
	w.minRTT = min(w.minRTT, int64(rtt))
	w.maxInFlight = max(w.maxInFlight, inFlight)
	w.dropped = w.dropped || dropped
	if w.open && t <= w.end {
		return w.ctl.Limit()
	}
	limit := w.ctl.Limit()
	if w.n >= w.minSamples {
		mean := time.Duration(math.MaxInt64)
		if m := w.sum / float64(w.n); m < float64(math.MaxInt64) {
			mean = time.Duration(m)
		}
		limit = w.ctl.Sample(now, mean, w.maxInFlight, w.dropped)
	}
	w.open = true
	w.end = t + min(max(2*min(w.minRTT, w.maxDur), w.minDur), w.maxDur)
	w.n, w.sum, w.minRTT, w.maxInFlight, w.dropped = 0, 0, math.MaxInt64, 0, false
	return limit
}
