package algo

import "time"

// Never is the RetryAfter of a request whose cost exceeds what the limit can
// ever admit: retrying it is pointless. Any negative RetryAfter means never.
const Never time.Duration = -1

// Decision is the outcome of one request, with everything an HTTP or gRPC
// layer needs to tell the client (Retry-After and the RateLimit fields).
// It is returned by value so that deciding allocates nothing.
type Decision struct {
	// Allowed reports whether the request was admitted and its cost spent.
	Allowed bool
	// HandedOver reports that the key was handed over (Keyed.HandOverHashAt)
	// to a limiter of the caller's: the store decided nothing and spent
	// nothing, and the caller decides the request there.
	HandedOver bool
	// Limit is the largest cost the limit admits at once: Limit for the
	// window algorithms, the bucket capacity for TokenBucket, and 1+Burst for
	// GCRA (as redis-cell reports it).
	Limit int64
	// Remaining is how much more cost would be admitted right now, after
	// this decision.
	Remaining int64
	// RetryAfter is how long to wait before a request of the same cost can
	// be admitted: zero when Allowed, negative (Never) when it never can.
	// For a peek (cost 0) it is how long until one unit is available.
	RetryAfter time.Duration
	// ResetAfter is how long until the limit is back to full capacity if no
	// more requests arrive.
	ResetAfter time.Duration
}

// verdict is a Decision without Limit, which is fixed per limit. The
// algorithms return it instead of a Decision because a struct of at most
// four fields stays in registers: a five-field Decision passed up through
// several calls is copied through memory at each, and those copies cost
// more than the arithmetic of the algorithm.
type verdict struct {
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
}

// set completes v into the Decision callers see. It writes the fields in
// place: building a Decision and returning it whole copies it through
// memory, which showed up on the agent's request path.
func (d *Decision) set(v verdict, limit int64) {
	d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter = v.allowed, limit, v.remaining, v.retryAfter, v.resetAfter
}
