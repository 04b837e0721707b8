package retry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"
)

// Defaults used for the zero fields of Options.
const (
	DefaultMaxRetries = 3
	DefaultBaseDelay  = 500 * time.Millisecond
	DefaultMinDelay   = 100 * time.Millisecond
	DefaultMaxDelay   = 30 * time.Second
	// DefaultBudgetTokens and DefaultBudgetRatio are gRPC's retry
	// throttling example values: retries stop after about five failures in
	// a row and come back at one retry per ten successes.
	DefaultBudgetTokens = 10
	DefaultBudgetRatio  = 0.1
)

// Options configures a Transport. The zero value is valid and means the
// defaults above.
type Options struct {
	// MaxRetries is how many times one request may be retried, so at most
	// MaxRetries+1 attempts reach the server. Zero means DefaultMaxRetries;
	// negative is an error.
	MaxRetries int

	// BaseDelay is the largest wait before the first retry when the server
	// gives no hint; each later retry doubles it, up to MaxDelay. Zero means
	// DefaultBaseDelay.
	BaseDelay time.Duration

	// MinDelay is the shortest wait before any retry, even when the server
	// says Retry-After: 0 or the random draw is zero, so a rejected request
	// is never resent at once. Zero means DefaultMinDelay; by design it
	// cannot be made zero. It must not exceed MaxDelay.
	MinDelay time.Duration

	// MaxDelay bounds every wait. Backoff never draws more than it, and when
	// the server asks for a longer wait the Transport does not retry: it
	// returns the response to the caller, who can decide. Zero means
	// DefaultMaxDelay.
	MaxDelay time.Duration

	// Budget caps retries as a fraction of requests. Share one Budget among
	// several Transports to cap them together. Nil means a new Budget for
	// this Transport alone, with DefaultBudgetTokens and DefaultBudgetRatio.
	Budget *Budget

	// Replayable reports whether a request may be sent more than once. Nil
	// allows every method, since a 429 means the server turned the request
	// away without acting on it. Use Idempotent to retry only idempotent
	// requests, which is safer if a 503 may come from a server that did
	// act. Whatever it says, a request whose body cannot be re-obtained is
	// never retried.
	Replayable func(req *http.Request) bool

	// ShouldRetry reports whether the outcome of one attempt is worth
	// retrying; exactly one of resp and err is non-nil. Nil means
	// DefaultShouldRetry: 429 and 503 responses, never errors. An error
	// while the request's context is done is never retried, whatever
	// ShouldRetry says.
	ShouldRetry func(resp *http.Response, err error) bool

	// OnRetry, if set, is called before each wait. attempt is the number of
	// the attempt that failed (1 for the first), delay the wait before the
	// next one, and resp or err the failed outcome. It must not read or
	// close resp.Body, which the Transport drains and closes.
	OnRetry func(attempt int, delay time.Duration, resp *http.Response, err error)

	// OnGiveUp, if set, is called when a retryable outcome is returned to
	// the caller instead of retried. attempt is the number of attempts made
	// and reason one of ErrBudgetExhausted, ErrAttemptsExhausted,
	// ErrWaitTooLong or ErrNotReplayable.
	OnGiveUp func(attempt int, reason error)

	// Now returns the current time, used to turn a Retry-After HTTP-date
	// into a wait. Nil means time.Now.
	Now func() time.Time

	// Sleep waits for d, or until ctx is done, in which case it returns
	// ctx.Err(). Nil means a timer.
	Sleep func(ctx context.Context, d time.Duration) error

	// Rand returns a number in [0, 1) for the backoff jitter; values outside
	// are clamped. It may be called from several goroutines at once. Nil
	// means math/rand/v2's Float64.
	Rand func() float64
}

// config is Options with the defaults filled in and checked.
type config struct {
	maxRetries                    int
	baseDelay, minDelay, maxDelay time.Duration
	budget                        *Budget
	replayable                    func(*http.Request) bool
	shouldRetry                   func(*http.Response, error) bool
	onRetry                       func(int, time.Duration, *http.Response, error)
	onGiveUp                      func(int, error)
	now                           func() time.Time
	sleep                         func(context.Context, time.Duration) error
	rand                          func() float64
}

// compile validates o and fills in the defaults.
func (o Options) compile() (config, error) {
	c := config{
		maxRetries:  o.MaxRetries,
		baseDelay:   o.BaseDelay,
		minDelay:    o.MinDelay,
		maxDelay:    o.MaxDelay,
		budget:      o.Budget,
		replayable:  o.Replayable,
		shouldRetry: o.ShouldRetry,
		onRetry:     o.OnRetry,
		onGiveUp:    o.OnGiveUp,
		now:         o.Now,
		sleep:       o.Sleep,
		rand:        o.Rand,
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"BaseDelay", o.BaseDelay}, {"MinDelay", o.MinDelay}, {"MaxDelay", o.MaxDelay}} {
		if f.v < 0 {
			return config{}, &ConfigError{Field: f.name, Reason: fmt.Sprintf("%v is negative", f.v)}
		}
	}
	if o.MaxRetries < 0 {
		return config{}, &ConfigError{Field: "MaxRetries", Reason: fmt.Sprintf("%d is negative", o.MaxRetries)}
	}
	if c.maxRetries == 0 {
		c.maxRetries = DefaultMaxRetries
	}
	if c.baseDelay == 0 {
		c.baseDelay = DefaultBaseDelay
	}
	if c.minDelay == 0 {
		c.minDelay = DefaultMinDelay
	}
	if c.maxDelay == 0 {
		c.maxDelay = DefaultMaxDelay
	}
	if c.minDelay > c.maxDelay {
		return config{}, &ConfigError{Field: "MinDelay", Reason: fmt.Sprintf("%v exceeds MaxDelay %v", c.minDelay, c.maxDelay)}
	}
	if c.budget == nil {
		b, err := NewBudget(DefaultBudgetTokens, DefaultBudgetRatio)
		if err != nil {
			return config{}, err
		}
		c.budget = b
	}
	if c.replayable == nil {
		c.replayable = func(*http.Request) bool { return true }
	}
	if c.shouldRetry == nil {
		c.shouldRetry = DefaultShouldRetry
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.sleep == nil {
		c.sleep = sleep
	}
	if c.rand == nil {
		c.rand = rand.Float64
	}
	return c, nil
}

// DefaultShouldRetry retries 429 Too Many Requests and 503 Service
// Unavailable responses, and no errors: a transport error may come after
// the server acted on the request.
func DefaultShouldRetry(resp *http.Response, err error) bool {
	if err != nil || resp == nil {
		return false
	}
	return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
}
