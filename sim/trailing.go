package sim

import "time"

// Trailing counts events over a sliding period, in buckets: one more than
// asked for, so that the count always covers the whole trailing period
// (and at most one bucket more). Times are offsets from any fixed origin,
// and never go backwards. It is not safe for concurrent use.
type Trailing struct {
	buckets []int64
	width   time.Duration
	head    int64 // index of the newest bucket, as a count of widths
	sum     int64
}

// NewTrailing counts over period in n buckets.
func NewTrailing(period time.Duration, n int) *Trailing {
	return &Trailing{buckets: make([]int64, n+1), width: max(period/time.Duration(n), 1)}
}

// advance moves to the bucket holding at, forgetting old ones.
func (r *Trailing) advance(at time.Duration) {
	idx := int64(at / r.width)
	if idx-r.head >= int64(len(r.buckets)) {
		clear(r.buckets)
		r.sum, r.head = 0, idx
		return
	}
	for r.head < idx {
		r.head++
		b := &r.buckets[r.head%int64(len(r.buckets))]
		r.sum -= *b
		*b = 0
	}
}

// Add counts one event at at.
func (r *Trailing) Add(at time.Duration) {
	r.advance(at)
	r.buckets[r.head%int64(len(r.buckets))]++
	r.sum++
}

// Count is how many events the trailing period up to at holds.
func (r *Trailing) Count(at time.Duration) int64 {
	r.advance(at)
	return r.sum
}
