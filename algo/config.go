package algo

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Algorithm names one of the rate-limit algorithms. The zero value is not a
// valid algorithm, so a Config that forgets to name one is an error rather
// than a silent default.
type Algorithm uint8

// The algorithms, in the order the design introduces them.
const (
	FixedWindow   Algorithm = iota + 1 // fixed_window
	SlidingLog                         // sliding_log
	SlidingWindow                      // sliding_window: the sliding window counter
	TokenBucket                        // token_bucket
	GCRA                               // gcra
)

var algorithmNames = [...]string{
	FixedWindow:   "fixed_window",
	SlidingLog:    "sliding_log",
	SlidingWindow: "sliding_window",
	TokenBucket:   "token_bucket",
	GCRA:          "gcra",
}

// Algorithms lists every valid algorithm.
func Algorithms() []Algorithm {
	return []Algorithm{FixedWindow, SlidingLog, SlidingWindow, TokenBucket, GCRA}
}

// String returns the algorithm's name as rule files spell it.
func (a Algorithm) String() string {
	if a.valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

func (a Algorithm) valid() bool { return a >= FixedWindow && a <= GCRA }

// Windowed reports whether the algorithm counts per window (fixed_window,
// sliding_window, sliding_log) rather than refilling at a rate.
func (a Algorithm) Windowed() bool {
	return a == FixedWindow || a == SlidingWindow || a == SlidingLog
}

// ParseAlgorithm returns the algorithm a rule file names.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms() {
		if algorithmNames[a] == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want one of fixed_window, sliding_log, sliding_window, token_bucket, gcra)", ErrInvalidConfig, s)
}

// MarshalText implements encoding.TextMarshaler.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.valid() {
		return nil, fmt.Errorf("%w: unknown algorithm %d", ErrInvalidConfig, uint8(a))
	}
	return []byte(algorithmNames[a]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// ErrInvalidConfig is wrapped by every configuration error, so callers can
// branch on errors.Is(err, algo.ErrInvalidConfig).
var ErrInvalidConfig = errors.New("algo: invalid configuration")

// ConfigError reports which field of a Config is wrong and why.
type ConfigError struct {
	Field  string // the Config field, e.g. "Limit"
	Reason string
}

func (e *ConfigError) Error() string { return "algo: invalid " + e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Config describes one limit: Limit units of cost per Period.
//
// Burst means what each algorithm's users expect it to mean:
//   - TokenBucket: the bucket's capacity, the largest cost admitted at once.
//     Zero means Limit (one period's worth).
//   - GCRA: the burst tolerance as redis-cell's max_burst: up to 1+Burst
//     units back to back. Zero means strictly spaced requests.
//   - FixedWindow, SlidingWindow, SlidingLog: must be zero; the window
//     itself is the burst.
//
// Slack is for SlidingWindow only: the estimate of the trailing window may
// reach Limit + Slack, while each aligned window still counts at most
// Limit. The estimate weighs the previous window's whole count by the time
// left, rounded up, so a subject that fills every window stops one unit
// short of Limit at the end of each; a Slack of 1 lets it reach Limit,
// and never more, in every aligned window. The agent gives it to a node's
// part of a fleet's limit, where the lost unit is lost once per node.
type Config struct {
	Algorithm Algorithm
	Limit     int64
	Period    time.Duration
	Burst     int64
	Slack     int64
	// Calendar, if its Unit is set, counts a FixedWindow's windows on the
	// calendar (a month from the 17th in Europe/Berlin) rather than as
	// multiples of Period since the Unix epoch; Period is then the unit's
	// nominal length (CalendarUnit.Nominal).
	Calendar Calendar
}

// MaxPeriod is the longest Period a Config may have: a century. A token
// bucket's capacity, and GCRA's burst, must refill within it too.
const MaxPeriod = maxPeriod

// Bounds that keep every computation inside int64 nanoseconds.
const (
	maxPeriod = 100 * 365 * 24 * time.Hour // a century
	// maxWindowLimit bounds SlidingWindow's counters, which are packed as two
	// uint32 into the fixed per-key record.
	maxWindowLimit = math.MaxUint32
	// maxLogLimit bounds SlidingLog, whose memory per key grows with Limit.
	maxLogLimit = 1 << 24
)

// Validate reports the first problem with c, naming the field.
func (c Config) Validate() error {
	_, err := compile(c)
	return err
}

// params is a Config compiled into the numbers the hot path uses.
type params struct {
	alg    Algorithm
	limit  int64
	period int64 // ns
	burst  int64

	// maxCost is the largest cost that can ever be admitted.
	maxCost int64
	// emission is GCRA's T and TokenBucket's time per token, in ns.
	emission int64
	// tau is GCRA's burst tolerance T·Burst, in ns.
	tau int64
	// perEmission divides by emission without a hardware division.
	perEmission divider
	// invPeriod is 1/period, for SlidingWindow's estimate.
	invPeriod float64
	// slack is SlidingWindow's Slack: how far the estimate may exceed
	// limit.
	slack int64
	// cal is a FixedWindow's calendar windows, nil for windows aligned
	// to the Unix epoch.
	cal *calendarWindows
}

func compile(c Config) (params, error) {
	if !c.Algorithm.valid() {
		if c.Algorithm == 0 {
			return params{}, &ConfigError{"Algorithm", "not set (want one of fixed_window, sliding_log, sliding_window, token_bucket, gcra)"}
		}
		return params{}, &ConfigError{"Algorithm", fmt.Sprintf("unknown algorithm %d", uint8(c.Algorithm))}
	}
	if c.Limit <= 0 {
		return params{}, &ConfigError{"Limit", fmt.Sprintf("must be positive, got %d", c.Limit)}
	}
	if c.Period <= 0 {
		return params{}, &ConfigError{"Period", fmt.Sprintf("must be positive, got %v", c.Period)}
	}
	if c.Period > maxPeriod {
		return params{}, &ConfigError{"Period", fmt.Sprintf("must be at most %v, got %v", maxPeriod, c.Period)}
	}
	if c.Burst < 0 {
		return params{}, &ConfigError{"Burst", fmt.Sprintf("must not be negative, got %d", c.Burst)}
	}
	if c.Slack < 0 {
		return params{}, &ConfigError{"Slack", fmt.Sprintf("must not be negative, got %d", c.Slack)}
	}
	if c.Slack != 0 && c.Algorithm != SlidingWindow {
		return params{}, &ConfigError{"Slack", fmt.Sprintf("applies only to sliding_window (got %d for %s)", c.Slack, c.Algorithm)}
	}
	if c.Slack > c.Limit {
		return params{}, &ConfigError{"Slack", fmt.Sprintf("must be at most Limit %d, got %d", c.Limit, c.Slack)}
	}
	p := params{alg: c.Algorithm, limit: c.Limit, period: int64(c.Period), burst: c.Burst, slack: c.Slack}
	if c.Calendar.Unit != 0 {
		if err := c.Calendar.Validate(); err != nil {
			return params{}, &ConfigError{"Calendar", err.Error()}
		}
		if c.Algorithm != FixedWindow {
			return params{}, &ConfigError{"Calendar", fmt.Sprintf("counts fixed_window only: %s cannot count windows of unequal length", c.Algorithm)}
		}
		if n := c.Calendar.Unit.Nominal(); c.Period != n {
			return params{}, &ConfigError{"Period", fmt.Sprintf("must be the calendar's nominal %v, got %v", n, c.Period)}
		}
		p.cal = newCalendarWindows(c.Calendar)
	}
	switch c.Algorithm {
	case FixedWindow, SlidingWindow, SlidingLog:
		if c.Burst != 0 {
			return params{}, &ConfigError{"Burst", fmt.Sprintf("applies only to token_bucket and gcra; %s admits at most Limit per window (got %d)", c.Algorithm, c.Burst)}
		}
		if c.Algorithm == SlidingWindow && c.Limit > maxWindowLimit {
			return params{}, &ConfigError{"Limit", fmt.Sprintf("must be at most %d for sliding_window, got %d", int64(maxWindowLimit), c.Limit)}
		}
		if c.Algorithm == SlidingLog && c.Limit > maxLogLimit {
			return params{}, &ConfigError{"Limit", fmt.Sprintf("must be at most %d for sliding_log, which stores one timestamp per admitted unit; use sliding_window", maxLogLimit)}
		}
		p.maxCost = c.Limit
		p.invPeriod = 1 / float64(c.Period)
	case TokenBucket:
		p.emission = int64(c.Period) / c.Limit
		if p.emission == 0 {
			return params{}, &ConfigError{"Limit", fmt.Sprintf("%d per %v is finer than one unit per nanosecond", c.Limit, c.Period)}
		}
		p.maxCost = c.Burst
		if p.maxCost == 0 {
			p.maxCost = c.Limit
		}
		if p.maxCost > int64(maxPeriod)/p.emission {
			return params{}, &ConfigError{"Burst", fmt.Sprintf("%d takes longer than %v to refill", p.maxCost, maxPeriod)}
		}
	case GCRA:
		p.emission = int64(c.Period) / c.Limit
		if p.emission == 0 {
			return params{}, &ConfigError{"Limit", fmt.Sprintf("%d per %v is finer than one unit per nanosecond", c.Limit, c.Period)}
		}
		if c.Burst >= int64(maxPeriod)/p.emission {
			return params{}, &ConfigError{"Burst", fmt.Sprintf("%d takes longer than %v to drain", c.Burst, maxPeriod)}
		}
		p.tau = p.emission * c.Burst
		p.maxCost = c.Burst + 1
	}
	if p.emission > 0 {
		p.perEmission = newDivider(p.emission)
	}
	return p, nil
}

// config returns the Config p was compiled from.
func (p *params) config() Config {
	c := Config{Algorithm: p.alg, Limit: p.limit, Period: time.Duration(p.period), Burst: p.burst, Slack: p.slack}
	if p.cal != nil {
		c.Calendar = p.cal.cal
	}
	return c
}
