package retry

import (
	"fmt"
	"net/http"
	"time"
)

// Transport is an http.RoundTripper that retries 429 and 503 responses
// politely; see the package documentation. Create one with New; the zero
// value is not usable. A Transport is safe for concurrent use.
type Transport struct {
	base http.RoundTripper
	cfg  config
}

// New returns a Transport that sends requests through base, or through
// http.DefaultTransport if base is nil. It returns an error wrapping
// ErrInvalidConfig, naming the field, if opts is invalid.
func New(base http.RoundTripper, opts Options) (*Transport, error) {
	cfg, err := opts.compile()
	if err != nil {
		return nil, err
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &Transport{base: base, cfg: cfg}, nil
}

// RoundTrip sends req, retrying as the package documentation describes.
//
// It returns the first outcome that is not worth retrying, or the last one
// when it gives up (see Options.OnGiveUp): a response the caller must
// close, or an error. An error from an attempt after the first is wrapped
// with the number of attempts made; errors.Is and errors.As see through it.
// If req's context is done while waiting between attempts, RoundTrip
// returns at once with an error wrapping the context's error, having closed
// the response it held.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	c := &t.cfg
	replayable := bodyReplayable(req) && c.replayable(req)
	next := req
	for attempt := 1; ; attempt++ {
		resp, err := t.base.RoundTrip(next)
		if err != nil && ctx.Err() != nil {
			return nil, attemptErr(err, attempt) // the caller gave up: not the server's failure
		}
		if !c.shouldRetry(resp, err) {
			if err == nil && resp.StatusCode < http.StatusInternalServerError {
				c.budget.RecordSuccess()
			}
			return resp, attemptErr(err, attempt)
		}
		mayRetry := c.budget.RecordFailure()
		delay, reason := t.plan(attempt, resp, replayable, mayRetry)
		if reason != nil {
			if c.onGiveUp != nil {
				c.onGiveUp(attempt, reason)
			}
			return resp, attemptErr(err, attempt)
		}
		r, gerr := replay(req)
		if gerr != nil {
			discard(resp)
			return nil, fmt.Errorf("retry: getting the body for attempt %d: %w", attempt+1, gerr)
		}
		next = r
		if c.onRetry != nil {
			c.onRetry(attempt, delay, resp, err)
		}
		discard(resp)
		if werr := c.sleep(ctx, delay); werr != nil {
			if next.Body != nil {
				_ = next.Body.Close()
			}
			return nil, fmt.Errorf("retry: waiting %v before attempt %d: %w", delay, attempt+1, werr)
		}
	}
}

// plan decides whether to retry after a failed attempt and, if so, how
// long to wait. reason is nil to retry, or why not.
func (t *Transport) plan(attempt int, resp *http.Response, replayable, mayRetry bool) (delay time.Duration, reason error) {
	c := &t.cfg
	if !replayable {
		return 0, ErrNotReplayable
	}
	if attempt > c.maxRetries {
		return 0, ErrAttemptsExhausted
	}
	var hint time.Duration
	ok := false
	if resp != nil {
		hint, ok = HeaderWait(resp.Header, c.now())
	}
	switch {
	case ok && hint > c.maxDelay:
		return 0, ErrWaitTooLong
	case ok:
		delay = max(hint, c.minDelay)
	default:
		delay = jitter(c.baseDelay, c.minDelay, c.maxDelay, attempt, c.rand())
	}
	if !mayRetry {
		return 0, ErrBudgetExhausted
	}
	return delay, nil
}

// CloseIdleConnections closes the idle connections of the base
// RoundTripper, if it has such a method, so that http.Client's method of
// the same name reaches through the Transport.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// attemptErr wraps an error from an attempt after the first with the number
// of attempts made. The first attempt's error is returned unchanged, since
// the Transport added nothing to it.
func attemptErr(err error, attempt int) error {
	if err == nil || attempt == 1 {
		return err
	}
	return fmt.Errorf("retry: after %d attempts: %w", attempt, err)
}
