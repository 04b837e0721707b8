package resp

import (
	"strings"

	"github.com/allot-io/allot/agent"
)

// check answers ALLOT.CHECK tenant T [user U] [route R] [ip IP] [plan P]
// [priority NAME] [cost N]: the decision /v1/check gives, against every
// rule. RESP2: an array of the integer 1 (admitted) or 0 (refused), the
// deciding rule, its limit, the remaining, the retry-after and the reset
// in milliseconds (retry-after 0 when admitted, -1 when never
// admissible). RESP3: a map of the same, allowed a boolean. A cost of 0
// is a peek, as on /v1/check.
func (c *conn) check(args [][]byte) {
	if len(args) < 3 || len(args)%2 == 0 {
		c.fail("ERR wrong number of arguments for 'allot.check' command: want ALLOT.CHECK tenant T [user U] [route R] [ip IP] [plan P] [priority NAME] [cost N]")
		return
	}
	var req agent.Request
	seenTenant := false
	for i := 1; i < len(args); i += 2 {
		var ub [24]byte
		v := args[i+1]
		switch string(upper(&ub, args[i])) {
		case "TENANT":
			req.Tenant, seenTenant = c.str(v), true
		case "USER":
			req.User = c.str(v)
		case "ROUTE":
			req.Route = c.str(v)
		case "IP":
			req.IP = c.str(v)
		case "PLAN":
			req.Plan = c.str(v)
		case "PRIORITY":
			p, ok := priority(v)
			if !ok {
				c.fail("ERR priority '%s': want interactive, batch, critical or exempt", printable(v))
				return
			}
			req.Priority = p
		case "COST":
			n, ok := parseInt(v)
			if !ok || n < 0 || n > agent.MaxCost {
				c.fail("ERR cost '%s': want an integer from 0 to %d", printable(v), int64(agent.MaxCost))
				return
			}
			req.Cost, req.Peek = n, n == 0
		default:
			c.fail("ERR unknown ALLOT.CHECK option '%s': want tenant, user, route, ip, plan, priority or cost", printable(args[i]))
			return
		}
	}
	if !seenTenant {
		c.fail("ERR ALLOT.CHECK needs tenant T")
		return
	}
	if err := agent.ValidateRequest(req); err != nil {
		c.fail("ERR %s", strings.TrimPrefix(err.Error(), "agent: invalid request: "))
		return
	}
	d := c.s.a.Check(req)
	c.decision(&d)
}

// decision writes a Decision as ALLOT.CHECK's reply.
func (c *conn) decision(d *agent.Decision) {
	retry := d.RetryAfter.Milliseconds()
	switch {
	case d.Allowed:
		retry = 0
	case d.RetryAfter < 0:
		retry = -1
	}
	w := &c.w
	if w.resp3 {
		w.mapHead(6)
		w.bulk("allowed")
		w.boolean(d.Allowed)
	} else {
		w.array(6)
		w.boolean(d.Allowed)
	}
	if w.resp3 {
		w.bulk("rule")
	}
	w.bulk(d.Rule)
	if w.resp3 {
		w.bulk("limit")
	}
	w.int(d.Limit)
	if w.resp3 {
		w.bulk("remaining")
	}
	w.int(max(d.Remaining, 0))
	if w.resp3 {
		w.bulk("retry_after_ms")
	}
	w.int(retry)
	if w.resp3 {
		w.bulk("reset_ms")
	}
	w.int(d.ResetAfter.Milliseconds())
}

// priority reads a priority's name without allocating.
func priority(b []byte) (agent.Priority, bool) {
	switch string(b) {
	case "", "interactive":
		return agent.Interactive, true
	case "batch":
		return agent.Batch, true
	case "critical":
		return agent.Critical, true
	case "exempt":
		return agent.Exempt, true
	}
	return 0, false
}
