package agent

import (
	"github.com/allot-io/allot/internal/timeutil"
	"sync/atomic"
	"time"
)

// Clock tells the agent the time. Tests pass a clock they control; the
// default reads the system clock every millisecond in the background, so a
// check costs an atomic load instead of a system call.
type Clock interface {
	Now() time.Time
}

// timeSource is where the agent's background loops take their timers:
// the Clock's own when it makes them (timeutil.Manual does), the system's
// otherwise.
func timeSource(c Clock) timeutil.TimeSource {
	if c == nil {
		return timeutil.System{}
	}
	return timeutil.Sources(c)
}

// clock is the agent's time: monotonic local time, plus the offset to the
// coordinators' clock learned from every exchange. Window boundaries and
// billing windows follow the coordinators' clock, so a gateway whose own
// clock is seconds off still agrees with the fleet about which window a
// request belongs to; refill follows the monotonic clock.
type clock struct {
	src    Clock     // nil: the coarse system clock
	start  time.Time // carries a monotonic reading
	coarse atomic.Int64
	offset atomic.Int64 // ns to add to local time to get coordinator time
}

// tick is the coarse clock's resolution.
const tick = time.Millisecond

func newClock(src Clock) *clock {
	c := &clock{src: src, start: time.Now()}
	c.refresh()
	return c
}

// refresh reads the local clock into the coarse clock.
func (c *clock) refresh() { c.advance(c.read()) }

// read is the system's monotonic clock, in Unix nanoseconds.
func (c *clock) read() int64 { return c.start.UnixNano() + int64(time.Since(c.start)) }

// advance moves the coarse clock to t unless it is there already: the
// refresher and catchUp both store, and the clock never goes back.
func (c *clock) advance(t int64) {
	for {
		cur := c.coarse.Load()
		if cur >= t || c.coarse.CompareAndSwap(cur, t) {
			return
		}
	}
}

// catchUp brings the coarse clock up to the system's when it has fallen
// more than two ticks behind, and returns the local time then and whether
// it moved. The refresher is one goroutine among many: on a loaded
// machine (another process on the cores, a container's CPU quota spent, a
// long GC) it may not run for a hundred milliseconds, and the checks
// that queued meanwhile were decided on the time it last stored. A token
// bucket that was empty then refused every one of them, though the
// stall had refilled it, and admitted as much more than its rate once
// the clock moved on: `allot demo` on a busy machine saw a gateway
// refuse all of a tenant's traffic for 0.4 s, then admit 1.5 times its
// lease for 0.8 s. A check calls it only when about to refuse, so an
// admission still costs one atomic load. Nothing happens under a Clock
// the caller gives.
func (c *clock) catchUp() (int64, bool) {
	if c.src != nil {
		return 0, false
	}
	now := c.read()
	if now-c.coarse.Load() <= 2*int64(tick) {
		return 0, false
	}
	c.advance(now)
	return c.coarse.Load(), true
}

// run refreshes the coarse clock until stop is closed.
func (c *clock) run(stop <-chan struct{}) {
	if c.src != nil {
		return
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			c.refresh()
		}
	}
}

// local is the agent's own time, in Unix nanoseconds.
func (c *clock) local() int64 {
	if c.src != nil {
		return c.src.Now().UnixNano()
	}
	return c.coarse.Load()
}

// now is the coordinators' time as the agent estimates it.
func (c *clock) now() int64 { return c.local() + c.offset.Load() }

// offsetSeconds is the offset to the coordinators' clock, as the gauge
// allot_agent_clock_offset_seconds and Status show it.
func (c *clock) offsetSeconds() float64 { return time.Duration(c.offset.Load()).Seconds() }

// observe folds in one exchange: the agent's clock when it sent (t0) and
// received (t1), and the coordinator's when the report arrived (received)
// and when it answered (answered). As in NTP, the time the coordinator
// held the report is taken out of the round trip, and the offset is the
// mean of the two one-way readings: ((received − t0) + (answered − t1)) ÷ 2,
// exact when the network's delay is the same both ways, whatever the
// coordinator's. A leader holds a report until its next allocation round
// (up to a quarter of an interval); taking the round trip's midpoint as
// the moment it read its clock put the agent's clock ahead by half that
// wait, so nodes changed windows at moments up to 125 ms apart, each
// early by its own wait (sidecars' offsets measured 12, 65 and 125 ms on
// one machine's clock). Spending the next window's share while the
// others spent this one's took a fixed-window quota to 107–114% of its
// limit on real processes (make accuracy-short), and the simulator saw
// half of its refusals come while the window was under its limit. A
// coordinator that does not say when the report arrived (received 0) is
// read at the midpoint.
func (c *clock) observe(t0, t1, received, answered int64) {
	switch {
	case answered == 0 || t1 < t0:
		return
	case received == 0 || received > answered:
		c.offset.Store(answered - (t0+t1)/2)
	default:
		c.offset.Store(((received - t0) + (answered - t1)) / 2)
	}
}
