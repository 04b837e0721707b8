// Package algo implements the rate-limit algorithms Allot enforces, as
// small, exact, allocation-free value types that can be used on their own.
//
// Five algorithms, from simplest to smoothest, plus a concurrency limit:
//
//   - FixedWindow: one counter per window, windows aligned to the Unix
//     epoch. Cheap, and admits up to twice the limit across a boundary.
//   - SlidingLog: one timestamp per admitted request; exact, and its memory
//     grows with the limit.
//   - SlidingWindow: the sliding window counter, estimate =
//     previous × overlap_fraction + current. Two counters per key.
//   - TokenBucket: a bucket of Burst tokens refilled at Limit per Period,
//     refilled lazily on read. Burst and sustained rate are separate numbers.
//   - GCRA: the generic cell rate algorithm as redis-cell and throttled define
//     it; one timestamp per key, the smoothest output.
//   - Concurrency: at most N requests in flight, whatever their arrival rate.
//
// # Time is a parameter
//
// Following golang.org/x/time/rate, every decision takes the current time as
// an argument (AllowAt), with a shorthand that reads the clock (Allow). No
// type in this package reads the clock on its own or starts a goroutine, so
// every behaviour can be tested with fixed instants. Time that moves
// backwards never hands out capacity: each algorithm treats an earlier
// instant as no later than the latest one it has seen.
//
// # Cost
//
// Each request has a cost (weight). Cost 0 is a peek: it is always allowed,
// spends nothing, and reports the current state. PeekAt asks for a cost
// without spending it: whether a request of that cost would be admitted
// now, and when it would be if not (a peek of one unit with nothing left
// is refused, where a peek of cost 0 is allowed). A cost larger than the
// algorithm can ever admit is refused with a negative RetryAfter (Never)
// instead of a wait that would never end.
//
// # Many subjects
//
// Limiter guards one subject. Keyed guards millions: a sharded open-addressing
// table whose per-key state is a fixed 32-byte, pointer-free record, so ten
// million keys cost no garbage-collector scanning and memory stays bounded by
// KeyedOptions.MaxKeys. A key whose state has returned to rest (a fresh key
// would decide the same) is removed after KeyedOptions.IdleTTL, incrementally
// and never by a stop-the-world scan, so expiry can never hand a subject a
// reset it had not earned.
package algo
