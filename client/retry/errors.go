package retry

import "errors"

// ErrInvalidConfig is wrapped by every configuration error returned by New
// and NewBudget, so callers can branch on errors.Is(err, ErrInvalidConfig).
var ErrInvalidConfig = errors.New("retry: invalid configuration")

// ConfigError reports which field or argument is wrong and why.
type ConfigError struct {
	Field  string // the Options field or NewBudget argument, e.g. "MinDelay"
	Reason string
}

// Error returns "retry: invalid <Field>: <Reason>".
func (e *ConfigError) Error() string { return "retry: invalid " + e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Reasons for not retrying a retryable response. RoundTrip never returns
// them: it returns the last response as the server sent it, with a nil error
// (or the last transport error, if the attempt failed). They are passed to
// Options.OnGiveUp so callers can tell the cases apart in logs and metrics.
var (
	// ErrBudgetExhausted means the retry budget is spent: too many recent
	// attempts failed compared with those that succeeded.
	ErrBudgetExhausted = errors.New("retry: retry budget exhausted")
	// ErrAttemptsExhausted means the request was already retried
	// Options.MaxRetries times.
	ErrAttemptsExhausted = errors.New("retry: retries exhausted")
	// ErrWaitTooLong means the server asked for a wait longer than
	// Options.MaxDelay.
	ErrWaitTooLong = errors.New("retry: server asked to wait longer than MaxDelay")
	// ErrNotReplayable means the request cannot be sent again: its body
	// cannot be re-obtained, or Options.Replayable refused it.
	ErrNotReplayable = errors.New("retry: request cannot be replayed")
)
