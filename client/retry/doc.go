// Package retry is a client-side helper for callers of rate-limited HTTP
// APIs: an http.RoundTripper that retries 429 Too Many Requests and 503
// Service Unavailable responses politely.
//
// # Why
//
// A rate limiter protects a server by rejecting the requests it cannot
// admit. That only helps if clients back off. A client that retries a 429 at
// once sends the same request again while the limit is still exhausted, gets
// rejected again, and retries again: a retry storm, in which every rejection
// multiplies the load it was meant to shed. When many clients are rejected
// together, for example when a shared quota runs out, they also retry
// together, and the limiter sees synchronised waves rather than a steady
// flow.
//
// This package turns rejections into scheduled requests:
//
//   - When the server says how long to wait (Retry-After, in seconds or as
//     an HTTP-date; the IETF RateLimit field's t parameter when r=0; or the
//     older RateLimit-Reset), the Transport waits exactly that long.
//     Retry-After wins when several are present.
//   - Otherwise it backs off exponentially with full jitter ("Exponential
//     Backoff And Jitter", AWS Architecture Blog): the wait before retry n
//     is drawn uniformly between MinDelay and min(MaxDelay,
//     BaseDelay·2^(n-1)), which spreads clients out instead of
//     synchronising them.
//   - No rejected request is ever resent at once: every wait is at least
//     MinDelay, even when the server says Retry-After: 0.
//   - A wait longer than MaxDelay is not attempted: the response goes back
//     to the caller, who knows better whether waiting is worth it.
//   - A Budget, like gRPC's retry throttling, caps retries as a fraction of
//     requests. While the server keeps failing, retries stop after a few,
//     so the helper can never multiply the load by more than a small factor.
//   - Only requests that can be sent again are retried: the body must be
//     re-obtainable (no body, or http.Request.GetBody set), and the
//     Options.Replayable rule (for example Idempotent) must agree.
//
// # Giving up
//
// When the Transport decides not to retry a retryable response (budget
// spent, attempts used up, wait too long, request not replayable) it returns
// that response unchanged, with a nil error, exactly as the server sent it:
// the caller sees the 429 and its headers. (If Options.ShouldRetry also
// retries transport errors, a last error is returned the same way.) ErrBudgetExhausted and the other
// reasons are never returned by RoundTrip; they are passed to the optional
// Options.OnGiveUp hook so that callers can count them.
//
// # Time and randomness
//
// The clock, the sleep and the random source are Options fields, defaulting
// to the real ones, so every behaviour can be tested without waiting. The
// package keeps no global mutable state.
package retry
