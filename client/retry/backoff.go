package retry

import (
	"context"
	"time"
)

// backoffCeiling returns min(maxDelay, base·2^(retry-1)), the largest wait
// before retry number retry (1 for the first) when the server gives no hint.
func backoffCeiling(base, maxDelay time.Duration, retry int) time.Duration {
	d := base
	for i := 1; i < retry && d < maxDelay; i++ {
		if d > maxDelay/2 {
			return maxDelay // doubling would pass the cap, or overflow
		}
		d *= 2
	}
	return min(d, maxDelay)
}

// jitter draws the wait before retry number retry: uniform between minDelay
// and the backoff ceiling, given r in [0, 1).
//
// This is "full jitter", random(0, ceiling), with the floor raised to
// minDelay by drawing from [minDelay, ceiling] rather than by clamping:
// clamping would put every draw below minDelay on minDelay itself, and
// clients that wait exactly as long as each other retry together.
func jitter(base, minDelay, maxDelay time.Duration, retry int, r float64) time.Duration {
	ceiling := backoffCeiling(base, maxDelay, retry)
	if ceiling <= minDelay {
		return minDelay
	}
	if !(r > 0) { // also catches NaN
		r = 0
	}
	d := minDelay + time.Duration(r*float64(ceiling-minDelay))
	return min(max(d, minDelay), ceiling)
}

// sleep is the default Options.Sleep: it waits for d on a timer, returning
// ctx.Err() as soon as ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
