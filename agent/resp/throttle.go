package resp

import (
	"time"

	"github.com/allot-io/allot/agent"
)

// ThrottleDomain is the descriptor domain CL.THROTTLE's keys are checked
// in, unless Config.ThrottleDomain names another: a descriptor rule of
// that domain, matching the entry "key" (any value), an algorithm of gcra
// (redis-cell's), decides them. The rule's own limit is not used: the
// call's is.
const ThrottleDomain = "cl.throttle"

// maxThrottlePeriod bounds CL.THROTTLE's period, in seconds: a century,
// algo's bound.
const maxThrottlePeriod = 100 * 365 * 24 * 3600

// throttle answers CL.THROTTLE key max_burst count period [quantity]:
// redis-cell's command, with its GCRA semantics and its reply, so that
// code written for redis-cell runs unchanged. The key may make count
// requests per period seconds, max_burst at once beyond the first; a
// request is quantity units (default 1; 0 asks without spending). The
// reply is five integers: 0 admitted or 1 limited, the limit (max_burst +
// 1), the remaining, the seconds until a retry may succeed (-1 when
// admitted) and the seconds until the key is back to its whole limit.
//
// The key's limit comes from the call, and is coordinated across the fleet
// as any key of the rule is: each distinct (count, period, max_burst) of
// a key is a key of its own, at most agent.MaxCallLimits of them per rule.
func (c *conn) throttle(args [][]byte) {
	if len(args) != 5 && len(args) != 6 {
		c.fail("ERR wrong number of arguments for 'cl.throttle' command: want CL.THROTTLE key max_burst count period [quantity]")
		return
	}
	var n [4]int64
	for i, name := range [...]string{"max_burst", "count", "period", "quantity"} {
		if i == 3 && len(args) == 5 {
			n[3] = 1
			break
		}
		v, ok := parseInt(args[2+i])
		if !ok || v < 0 {
			c.fail("ERR %s '%s': want a non-negative integer", name, printable(args[2+i]))
			return
		}
		n[i] = v
	}
	burst, count, period, quantity := n[0], n[1], n[2], n[3]
	switch {
	case count < 1:
		c.fail("ERR count must be at least 1")
		return
	case period < 1 || period > maxThrottlePeriod:
		c.fail("ERR period must be from 1 to %d seconds", int64(maxThrottlePeriod))
		return
	case quantity > agent.MaxCost:
		c.fail("ERR quantity must be at most %d", int64(agent.MaxCost))
		return
	case len(args[1]) > agent.MaxAttrLen:
		c.fail("ERR key: at most %d bytes", agent.MaxAttrLen)
		return
	}
	c.lim = agent.Limit{Requests: count, Per: time.Duration(period) * time.Second, Burst: burst}
	c.desc[0] = agent.Descriptor{Entries: c.entry[:], Cost: max(quantity, 1), Peek: quantity == 0, Limit: &c.lim}
	c.entry[0] = agent.Entry{Key: "key", Value: c.str(args[1])}
	c.decided = c.s.a.CheckDescriptors(c.s.cfg.ThrottleDomain, c.desc[:], 0, c.decided[:0])
	d := &c.decided[0]
	if d.Rule == "" {
		c.fail("ERR CL.THROTTLE: no descriptor rule of domain %q matches entry \"key\": add one (docs/api.md#the-redis-protocol)", c.s.cfg.ThrottleDomain)
		return
	}
	c.w.array(5)
	if d.Allowed {
		c.w.int(0)
	} else {
		c.w.int(1)
	}
	c.w.int(burst + 1)
	c.w.int(max(d.Available, 0))
	switch {
	case d.Allowed:
		c.w.int(-1)
	case d.RetryAfter < 0:
		c.w.int(-1) // never fits: more than the limit at once
	default:
		c.w.int(ceilSeconds(d.RetryAfter))
	}
	c.w.int(ceilSeconds(d.ResetAfter))
}

// ceilSeconds is d in whole seconds, rounded up: a client told to retry
// after it never retries too early.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
