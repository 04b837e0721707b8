package algo

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// AIMDConfig configures an AIMD controller. Zero fields take the defaults
// given, which are Netflix's except for Min.
type AIMDConfig struct {
	// Initial is the limit before the first sample. Zero means 20, moved
	// into [Min, Max].
	Initial int64
	// Min is the lowest limit, at least 1. Zero means 1.
	Min int64
	// Max is the highest limit, at most 2⁵³. Zero means 200.
	Max int64
	// Backoff is the factor a drop multiplies the limit by, in (0, 1).
	// Zero means 0.9.
	Backoff float64
	// Timeout is the round-trip time above which a request counts as
	// dropped even if it succeeded. Zero means 5s.
	Timeout time.Duration
}

// Defaults of AIMDConfig.
const (
	defaultAIMDBackoff = 0.9
	defaultAIMDTimeout = 5 * time.Second
)

// AIMD is the additive-increase, multiplicative-decrease controller TCP
// Reno uses for its congestion window, as Netflix's AIMDLimit applies it
// to concurrency:
//
//   - a sample that was dropped, or took longer than Timeout, multiplies the
//     limit by Backoff and rounds down: 20 becomes 18 at 0.9, then 16, 14;
//   - a successful sample while the limit is being used, in flight ≥
//     limit/2, adds one: 20 becomes 21;
//   - a successful sample while less than half the limit is used leaves it
//     alone: a quiet client has learned nothing about the dependency's
//     capacity, and growing on no evidence would leave a limit far too
//     high when the load arrives;
//
// and the result is kept within [Min, Max].
//
// Like TCP NewReno, and unlike Netflix's AIMDLimit, it backs off at most
// once per round trip: a sample of a request that started before the last
// backoff (now − rtt earlier than that backoff's now) was admitted under
// the limit the backoff already cut, and is ignored, dropped or not.
// Otherwise a dependency that stalls for a moment would time out every
// request in flight and each would multiply the limit by 0.9: 100 in
// flight would take the limit from 100 to its Min.
//
// Fed per request, the limit grows by about itself per round trip and
// overshoots the point where drops begin, up to about twice it (60 → 120
// in this package's simulation). Fed by Windowed, it grows by one per
// window and saws between that point and nine tenths of it: TCP's
// congestion avoidance.
//
// Sample takes a mutex; Limit does not. It is safe for concurrent use.
type AIMD struct {
	mu        sync.Mutex
	backoffAt int64 // UnixNano of the last backoff; guarded by mu
	backedOff bool  // whether there was one

	limit   atomic.Int64 // written under mu
	min     int64
	max     int64
	backoff float64
	timeout time.Duration
}

// NewAIMD returns an AIMD controller, or a *ConfigError naming the first
// invalid field of cfg.
func NewAIMD(cfg AIMDConfig) (*AIMD, error) {
	initial, lo, hi, err := limitBounds(cfg.Initial, cfg.Min, cfg.Max)
	if err != nil {
		return nil, err
	}
	backoff := cfg.Backoff
	if backoff == 0 {
		backoff = defaultAIMDBackoff
	}
	if !validFraction(backoff, false) {
		return nil, &ConfigError{"Backoff", fmt.Sprintf("must be in (0, 1), got %v", cfg.Backoff)}
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = defaultAIMDTimeout
	}
	if timeout < 0 {
		return nil, &ConfigError{"Timeout", fmt.Sprintf("must not be negative, got %v", cfg.Timeout)}
	}
	a := &AIMD{min: lo, max: hi, backoff: backoff, timeout: timeout}
	a.limit.Store(initial)
	return a, nil
}

// Limit returns the current limit.
func (a *AIMD) Limit() int64 { return a.limit.Load() }

// Sample applies one finished request to the limit as the type's comment
// describes, and returns the new limit.
func (a *AIMD) Sample(now time.Time, rtt time.Duration, inFlight int64, dropped bool) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur := a.limit.Load()
	end := now.UnixNano()
	if a.backedOff && end-int64(max(rtt, 0)) < a.backoffAt {
		return cur // admitted under the limit the last backoff already cut
	}
	next := cur
	switch {
	case dropped || rtt > a.timeout:
		next = int64(math.Floor(float64(cur) * a.backoff))
		a.backoffAt = max(a.backoffAt, end)
		a.backedOff = true
	case inFlight >= cur-cur/2: // inFlight ≥ ⌈cur/2⌉, without overflow
		next = cur + 1
	}
	next = min(max(next, a.min), a.max)
	a.limit.Store(next)
	return next
}
