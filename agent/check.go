package agent

import (
	bits64 "math/bits"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/rules"
)

// Check decides one request. It never waits for the network, takes no
// global lock, and allocates nothing for keys it has seen before.
//
// Without rules (a coordinated agent before the cluster's arrive, with no
// rules cache and no start-up rules) Config.UntilRules decides, and the
// decision has NoRules set.
//
// A request whose cost exceeds MaxCost is refused as never admissible
// (RetryAfter -1, no rule named) and counted under no rule: no limit can
// bill it without risking the counters. A tenant name longer than the
// coordinators accept is billed under allotpb.BoundName of it.
//
// Rules are evaluated cheapest first (global, ip, tenant, user, route). The
// first refusal ends the evaluation and what earlier rules admitted is
// given back, so no rule is charged for a request another refused; an
// admitted request is charged to every rule it passed.
//
// A request with Peek is decided as it would be now and spends nothing
// (see Request.Peek).
func (a *Agent) Check(req Request) (d Decision) {
	// A request is spent; a peek is the same decision, spending nothing,
	// and counted where it is answered: a deferred count, though a request
	// never ran it, cost every request a flag set on entry and tested at
	// each return.
	o := opSpend
	if req.Peek {
		o = opPeek
	}
	c := a.rules.Load()
	if c == nil {
		if o == opSpend {
			a.noRules(&d)
		} else {
			a.untilRules(&d)
			a.countPeek(&d)
		}
		return d
	}
	if c.standIn && o == opSpend {
		a.countStandIn(c)
	}
	if len(c.rules) == 0 {
		d.Allowed = true
		if o == opPeek {
			a.countPeek(&d)
		}
		return d
	}
	cost := req.Cost
	if cost <= 0 {
		cost = 1
	}
	if cost > MaxCost {
		a.invalid.Add(1)
		d.RetryAfter = -1 // never admissible, and counted under no rule
		if o == opPeek {
			a.countPeek(&d)
		}
		return d
	}
	local := a.clock.local()
	now := newInstants(local, local+a.clock.offset.Load())
	var rh reqHashes
	best := -1
	var bestR result
	var passed, shadowed ruleBits
	caughtUp := false
	for i, rs := range c.rules {
		if !rs.matches(&req) {
			continue
		}
		r := rs.decide(a, &req, &rh, rs.at(&now), cost, o)
		if !r.allowed() && !rs.rule.Shadow && !caughtUp {
			// About to refuse: on a clock that is current (clock.catchUp).
			// The rules passed before keep what they decided; the refused
			// one decides again, its first refusal counted as demand.
			caughtUp = true
			if l, ok := a.clock.catchUp(); ok {
				now = newInstants(l, l+a.clock.offset.Load())
				r = rs.decide(a, &req, &rh, rs.at(&now), cost, o)
			}
		}
		switch {
		case !r.allowed() && rs.rule.Shadow:
			// Admitted: nothing was spent, so nothing to undo.
			if o == opSpend {
				rs.shadowed.Add(1)
				shadowed.set(i)
			}
		case !r.allowed():
			if o == opSpend {
				if best >= 0 { // a rule passed: give back what it took
					c.undoPassed(a, &req, &rh, &passed, &now, cost, i)
				}
				c.countHidden(a, &req, &rh, i, cost)
				th := rh.get(a, &req, rules.AttrTenant)
				c.count(c.usage.get(th, req.Tenant, req.Plan), th, &req, 2*i+1, cost)
			} else {
				a.peeks[1].Add(1) // refused
			}
			a.fill(&d, rs, &req, r)
			return d
		case o == opPeek:
			// The tighter rule by what the request would leave, as
			// opSpend's results say.
			if best < 0 {
				best, bestR = i, r
			} else if l, bl := r.left(cost), bestR.left(cost); l.tighter(&bl) {
				best, bestR = i, r
			}
		default:
			passed.set(i)
			if best < 0 || r.tighter(&bestR) {
				best, bestR = i, r
			}
		}
	}
	if o == opSpend {
		passed.or(&shadowed, len(c.rules))
		if req.res != nil {
			req.res.hold(c, &passed, now, cost) // billed when settled
		} else {
			th := rh.get(a, &req, rules.AttrTenant)
			c.countPassed(c.usage.get(th, req.Tenant, req.Plan), th, &req, &passed, cost)
		}
	} else {
		a.peeks[0].Add(1) // admitted
	}
	if best < 0 {
		d.Allowed = true
		return d
	}
	a.fill(&d, c.rules[best], &req, bestR)
	return d
}

// maxRules bounds the rules the agent enforces from one set (install
// leaves the rest out, as problems): Check keeps which rules a request
// passed in a bitset of this many bits on its stack.
const maxRules = 1024

// ruleBits is a set of rule positions, below maxRules.
type ruleBits [maxRules / 64]uint64

func (b *ruleBits) set(i int) { b[i>>6] |= 1 << (i & 63) }

func (b *ruleBits) has(i int) bool { return b[i>>6]&(1<<(i&63)) != 0 }

// or adds o's rules to b's, of the first n rules.
func (b *ruleBits) or(o *ruleBits, n int) {
	for w := range words(n) {
		b[w] |= o[w]
	}
}

// words is how many of a ruleBits' words hold the first n rules: the
// loops over a set walk those, not all maxRules bits.
func words(n int) int { return (n + 63) >> 6 }

// undoPassed gives back the cost the rules in passed admitted, when rule
// refuser refused the request: no rule is charged for a request another
// refused. The rules nested in the refuser (compiled.nested) count it as
// demand they denied.
func (c *compiled) undoPassed(a *Agent, req *Request, rh *reqHashes, passed *ruleBits, now *instants, cost int64, refuser int) {
	nested := &c.nested[refuser]
	for w, bits := range passed[:words(len(c.rules))] {
		for bits != 0 {
			j := w<<6 | bits64.TrailingZeros64(bits)
			bits &= bits - 1
			rs := c.rules[j]
			o := opGiveBack
			if nested.has(j) {
				o = opGiveBackDenied
			}
			rs.decide(a, req, rh, rs.at(now), cost, o)
		}
	}
}

// countHidden counts a request rule refuser refused as demand the rules
// after it that are nested in it denied: the request never reached them.
func (c *compiled) countHidden(a *Agent, req *Request, rh *reqHashes, refuser int, cost int64) {
	nested := &c.nested[refuser]
	n := words(len(c.rules))
	for w := refuser >> 6; w < n; w++ {
		bits := nested[w]
		if w == refuser>>6 {
			bits &^= 1<<(refuser&63+1) - 1 // the rules up to the refuser
		}
		for bits != 0 {
			j := w<<6 | bits64.TrailingZeros64(bits)
			bits &= bits - 1
			if rs := c.rules[j]; rs.matches(req) {
				rs.hidden(a, req, rh, cost)
			}
		}
	}
}

// countPassed counts an admitted request's cost under every rule it
// passed (shadow rules that would have refused included).
// Rules that cover every request are counted with one add, when the
// request passed them all (an admitted Check always has).
func (c *compiled) countPassed(tu *tenantUsage, th algo.Hash, req *Request, passed *ruleBits, cost int64) {
	n := words(len(c.rules))
	every := &c.usage.every
	all := c.usage.anyEvery
	for w := range n {
		if passed[w]&every[w] != every[w] {
			all = false
			break
		}
	}
	if all {
		tu = c.count(tu, th, req, c.usage.everySlot(), cost)
	}
	for w, bits := range passed[:n] {
		if all {
			bits &^= every[w]
		}
		for bits != 0 {
			j := w<<6 | bits64.TrailingZeros64(bits)
			bits &= bits - 1
			tu = c.count(tu, th, req, 2*j, cost)
		}
	}
}

// count adds cost to a tenant's counter slot, finding the tenant's live
// counters again if it was dropped meanwhile, and returns them.
func (c *compiled) count(tu *tenantUsage, th algo.Hash, req *Request, slot int, cost int64) *tenantUsage {
	for !tu.add(slot, cost) {
		tu = c.usage.get(th, req.Tenant, req.Plan)
	}
	return tu
}

// fill writes a rule's result into the agent's decision, scaling the
// node's remaining share to the whole limit. It writes in place: copying a
// Decision whole through memory costs more than everything else in Check.
func (a *Agent) fill(d *Decision, rs *ruleState, req *Request, r result) {
	st := rs.store(req)
	limit := st.limit
	remaining := limit
	if r.limit > 0 {
		remaining = min(limit, int64(float64(r.remaining)*float64(limit)/float64(r.limit)))
	}
	d.Allowed, d.Rule, d.Scope = r.allowed(), rs.rule.Name, rs.scope
	d.Limit, d.Period, d.Remaining, d.Available = limit, st.ruleOf(rs).Period, remaining, r.remaining
	d.RetryAfter, d.ResetAfter, d.Fallback = r.retry, r.reset, rs.fallback.Load()
}
