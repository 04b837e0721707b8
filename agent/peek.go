package agent

// peek decides a request with Peek as Check would decide it without, and
// spends nothing: no rule's limiter, no usage counter (the ledger bills
// those, and allot_agent_decisions_total reads them), no hot key's
// counts, no lease demand. A request of Cost 0 is asked for as one of 1:
// whether one more request would be admitted. Every rule the request
// matches is asked; the first that would refuse it decides, else the one
// closest to its limit, as in Check. Remaining is what is left before
// the request, where a request's decision says what it left.
//
// Peeks are counted only in Agent.peeks (allot_agent_peeks_total), not in
// any count of decisions, shadow refusals, fail-mode or until-rules
// decisions: those count requests. A cost above MaxCost is refused and
// counted as invalid as a request's is.
func (a *Agent) peek(req *Request, d *Decision) {
	defer a.countPeek(d)
	c := a.rules.Load()
	if c == nil {
		a.untilRules(d)
		return
	}
	if len(c.rules) == 0 {
		d.Allowed = true
		return
	}
	cost := max(req.Cost, 1)
	if cost > MaxCost {
		a.invalid.Add(1)
		d.RetryAfter = -1
		return
	}
	local := a.clock.local()
	now := newInstants(local, local+a.clock.offset.Load())
	var rh reqHashes
	best := -1
	var bestR result
	for i, rs := range c.rules {
		if !rs.matches(req) {
			continue
		}
		r := rs.peek(a, req, &rh, rs.at(&now), cost)
		switch {
		case !r.allowed() && rs.rule.Shadow: // it would be admitted
		case !r.allowed():
			a.fill(d, rs, req, r)
			return
		default:
			if best < 0 || r.tighter(&bestR) {
				best, bestR = i, r
			}
		}
	}
	if best < 0 {
		d.Allowed = true
		return
	}
	a.fill(d, c.rules[best], req, bestR)
}

// countPeek counts a peek answered.
func (a *Agent) countPeek(d *Decision) {
	if d.Allowed {
		a.peeks[0].Add(1)
	} else {
		a.peeks[1].Add(1)
	}
}
