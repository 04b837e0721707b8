package algo

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Gradient2Config configures a Gradient2 controller. Zero fields take the
// defaults given, which are Netflix's except for Min and QueueSize.
type Gradient2Config struct {
	// Initial is the limit before the first sample. Zero means 20, moved
	// into [Min, Max].
	Initial int64
	// Min is the lowest limit, at least 1. Zero means 1.
	Min int64
	// Max is the highest limit, at most 2⁵³. Zero means 200.
	Max int64
	// Smoothing is the weight of each new estimate in the limit, in
	// (0, 1]; 1 replaces the limit with every estimate. Zero means 0.2.
	Smoothing float64
	// Tolerance is how many times the long-term RTT the short-term RTT may
	// reach before the limit shrinks, at least 1. Zero means 1.5.
	Tolerance float64
	// LongWindow is the number of samples the long-term RTT averages over
	// (an exponential average with factor 2/(LongWindow+1)). Zero means 600.
	LongWindow int
	// ShortWindow is the same for the short-term RTT, at most LongWindow.
	// Zero means 1: the last sample alone, as Netflix has it. Per-request
	// samples are noisy; 10 to 50 evens them out the way Netflix's
	// WindowedLimit does.
	ShortWindow int
	// QueueSize is how far the limit may run ahead of the estimate, so
	// that it keeps probing for more capacity. Zero means √limit, at
	// least 1 (10 at a limit of 100); a positive value is used as is.
	QueueSize int64
}

// Defaults of Gradient2Config.
const (
	defaultGradientSmoothing   = 0.2
	defaultGradientTolerance   = 1.5
	defaultGradientLongWindow  = 600
	defaultGradientShortWindow = 1
	// maxGradientWindow keeps the averaging factor well above float64's
	// resolution.
	maxGradientWindow = 1 << 30
)

// Constants of the algorithm, as Netflix fixes them.
const (
	// gradientMin bounds how much one estimate may shrink the limit: an
	// outlier, or a drop, halves it at most.
	gradientMin = 0.5
	// rttWarmup is how many samples an rttAverage averages plainly before
	// it turns exponential, so that the first sample does not dominate.
	rttWarmup = 10
	// driftRatio and driftDecay pull the long-term RTT down when it stands
	// more than twice the short-term one: after a long overload it would
	// otherwise take hundreds of samples to forget the queueing.
	driftRatio = 2
	driftDecay = 0.9
)

// Gradient2 is Netflix's Gradient2Limit: it compares a short-term RTT,
// what requests take now, with a long-term RTT, what they have taken over
// the last several hundred samples, and reads a rise of the one over the
// other as requests queueing in the dependency. Each sample computes
//
//	gradient = clamp(Tolerance × longRTT / shortRTT, 0.5, 1)
//	estimate = limit × gradient + queueSize
//	limit    = limit × (1 − Smoothing) + estimate × Smoothing
//
// and keeps the limit within [Min, Max]. With the defaults (tolerance 1.5,
// smoothing 0.2, queue √limit), at a limit of 100:
//
//   - latency steady, or up by less than half (short ≤ 1.5 × long): the
//     gradient is 1 and the limit grows by 0.2 × √100 = 2 per sample;
//   - latency up by 2.5× (short 25 ms, long 10 ms): the gradient is 0.6, the
//     estimate 100 × 0.6 + 10 = 70, and the limit 100 × 0.8 + 70 × 0.2 = 94;
//   - the gradient never goes below 0.5, so one sample never takes more
//     than a tenth of the limit, less 0.2 × queueSize.
//
// The long-term RTT is an exponential average over LongWindow samples
// (after a plain average over the first 10); the short-term one over
// ShortWindow, by default the last sample. A long-term RTT that stands
// above twice the short-term one, as after a long overload ends, is
// multiplied by 0.9 per sample until it is back within reach.
//
// Unlike Netflix's Gradient2Limit, which ignores drops, the controller
// treats a drop as the strongest sign of overload: the gradient 0.5, and
// never a higher limit. It leaves the drop's RTT out of both averages: a
// request rejected at once would otherwise pass for a fast one. A limit
// less than half used (in flight < limit/2) may shrink but never grows.
//
// Gradient2 knows no no-load latency, only how latency compares with its
// own recent past, so it answers changes of latency, not levels. A latency
// that stays high long enough becomes the long-term RTT, the gradient
// returns to 1 and the limit resumes growing by the queue size: under a
// load that fills any limit, with steady latency, the limit creeps up
// toward Max (Netflix's issue #137). Where latency must stay under a
// bound, AIMD with a Timeout holds it.
//
// Fed per request, the limit moves many times per round trip while each
// move shows its effect only a round trip later, and it overshoots both
// ways; Netflix feeds it windows of samples, which Windowed does.
//
// An rtt ≤ 0 counts as 1ns. Gradient2 ignores the sample's instant. Sample
// takes a mutex; Limit does not. It is safe for concurrent use.
type Gradient2 struct {
	mu       sync.Mutex
	estimate float64 // the limit before rounding down, in [min, max]
	long     rttAverage
	short    rttAverage

	limit atomic.Int64 // ⌊estimate⌋, readable without mu

	min, max  float64
	smoothing float64
	tolerance float64
	queueSize float64 // 0 means √limit
}

// NewGradient2 returns a Gradient2 controller, or a *ConfigError naming
// the first invalid field of cfg.
func NewGradient2(cfg Gradient2Config) (*Gradient2, error) {
	initial, lo, hi, err := limitBounds(cfg.Initial, cfg.Min, cfg.Max)
	if err != nil {
		return nil, err
	}
	smoothing := cfg.Smoothing
	if smoothing == 0 {
		smoothing = defaultGradientSmoothing
	}
	if !validFraction(smoothing, true) {
		return nil, &ConfigError{"Smoothing", fmt.Sprintf("must be in (0, 1], got %v", cfg.Smoothing)}
	}
	tolerance := cfg.Tolerance
	if tolerance == 0 {
		tolerance = defaultGradientTolerance
	}
	if !(tolerance >= 1) || math.IsInf(tolerance, 1) {
		return nil, &ConfigError{"Tolerance", fmt.Sprintf("must be a finite number of at least 1, got %v", cfg.Tolerance)}
	}
	longWindow := cfg.LongWindow
	if longWindow == 0 {
		longWindow = defaultGradientLongWindow
	}
	if longWindow < 0 || longWindow > maxGradientWindow {
		return nil, &ConfigError{"LongWindow", fmt.Sprintf("must be in [1, %d], got %d", maxGradientWindow, cfg.LongWindow)}
	}
	shortWindow := cfg.ShortWindow
	if shortWindow == 0 {
		shortWindow = defaultGradientShortWindow
	}
	if shortWindow < 0 || shortWindow > longWindow {
		return nil, &ConfigError{"ShortWindow", fmt.Sprintf("must be in [1, LongWindow = %d], got %d", longWindow, cfg.ShortWindow)}
	}
	if cfg.QueueSize < 0 || cfg.QueueSize > maxAdaptiveLimit {
		return nil, &ConfigError{"QueueSize", fmt.Sprintf("must be in [0, 2^53], got %d", cfg.QueueSize)}
	}
	g := &Gradient2{
		estimate:  float64(initial),
		long:      newRTTAverage(longWindow),
		short:     newRTTAverage(shortWindow),
		min:       float64(lo),
		max:       float64(hi),
		smoothing: smoothing,
		tolerance: tolerance,
		queueSize: float64(cfg.QueueSize),
	}
	g.limit.Store(initial)
	return g, nil
}

// Limit returns the current limit.
func (g *Gradient2) Limit() int64 { return g.limit.Load() }

// Sample applies one finished request to the limit as the type's comment
// describes, and returns the new limit.
func (g *Gradient2) Sample(_ time.Time, rtt time.Duration, inFlight int64, dropped bool) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()

	gradient := gradientMin
	if !dropped {
		r := float64(max(rtt, 1))
		short := g.short.add(r)
		long := g.long.add(r)
		if long > driftRatio*short {
			g.long.value *= driftDecay
		}
		gradient = min(max(g.tolerance*long/short, gradientMin), 1)
	}
	queue := g.queueSize
	if queue == 0 {
		queue = max(math.Sqrt(g.estimate), 1)
	}
	next := g.estimate*gradient + queue
	next = g.estimate*(1-g.smoothing) + next*g.smoothing
	if next > g.estimate && (dropped || float64(inFlight) < g.estimate/2) {
		// A drop never raises the limit (with a queue above half the
		// limit, 0.9 × limit + 0.2 × queue would), and an unused limit
		// gives no evidence to grow on.
		next = g.estimate
	}
	g.estimate = clampLimit(next, g.min, g.max)
	limit := int64(g.estimate)
	g.limit.Store(limit)
	return limit
}

// rttAverage is the exponential moving average Netflix's ExpAvgMeasurement
// keeps: the plain mean of the first min(window, 10) samples, then
// value = value × (1 − f) + sample × f with f = 2/(window+1), so that a
// window of 600 weighs each new sample at 1/300.5 and a window of 1 keeps
// only the last sample.
type rttAverage struct {
	value  float64 // ns
	n      int     // samples seen, up to warmup
	warmup int
	factor float64
}

func newRTTAverage(window int) rttAverage {
	return rttAverage{warmup: min(window, rttWarmup), factor: 2 / float64(window+1)}
}

// add folds sample (ns, positive) in and returns the new average.
func (a *rttAverage) add(sample float64) float64 {
	// Weighted sums rather than value += (sample − value) × f: with f = 1
	// that would cancel to 0, not sample, for values beyond 2⁵³ ns.
	f := a.factor
	if a.n < a.warmup {
		a.n++
		f = 1 / float64(a.n)
	}
	a.value = a.value*(1-f) + sample*f
	return a.value
}
