package agent

// op is what the one decision does with a request's cost. A request is
// decided in one place at each level (the rule set: Check; a rule:
// ruleState.decide; a global rule's classes and total: fairState.decide;
// a key's own limiter: hotKey.decide; a descriptor: decideDescriptor), as
// x/time/rate's reserveN is behind AllowN, ReserveN and WaitN: written
// once, a peek cannot drift from the request it stands for, nor a
// give-back from what the request took.
type op uint8

const (
	// opSpend decides the request and spends its cost if admitted: Check.
	opSpend op = iota
	// opPeek answers as opSpend would now, and spends nothing: no limit,
	// no usage billed, no decision counted, no lease asked for (a peek is
	// no demand), no fail-mode decision. Its result says what was left
	// before the request, where opSpend's says what it left.
	opPeek
	// opGiveBack gives back what opSpend took: a later rule refused the
	// request, or its reservation settled below the estimate.
	opGiveBack
	// opGiveBackDenied is opGiveBack that counts the cost, on a leased
	// key, as demand the key denied: the refuser's key decides this
	// rule's (compiled.nested), and the request is held back by it.
	opGiveBackDenied
)

// left is what an admitted peek's result says the request would leave:
// what was left before it, less its cost. A peek admitted with less left
// than its cost (an exempt request on a global rule's full total,
// admitted all the same) would take nothing, and leaves what it found.
func (r result) left(cost int64) result {
	if r.remaining >= cost {
		r.remaining -= cost
	}
	return r
}

// countPeek counts a peek answered.
func (a *Agent) countPeek(d *Decision) {
	if d.Allowed {
		a.peeks[0].Add(1)
	} else {
		a.peeks[1].Add(1)
	}
}
