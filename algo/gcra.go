package algo

// gcra decides a request of the given cost at now against the theoretical
// arrival time tat, as redis-cell and throttled define GCRA:
//
//	T = Period/Limit, τ = T·Burst
//	new_tat  = max(tat, now) + cost·T
//	allow_at = new_tat − (τ + T)
//	refuse if now < allow_at, with retry_after = allow_at − now
//
// It returns the TAT to store (unchanged on refusal) and the decision.
func (p *params) gcra(tat, now, cost int64) (int64, verdict) {
	var v verdict
	base := max(tat, now)
	if cost > p.maxCost {
		v.retryAfter = Never
		v.remaining, v.resetAfter = p.gcraRemaining(base, now), dur(base-now)
		return tat, v
	}
	newTAT := base + cost*p.emission
	if allowAt := newTAT - p.tau - p.emission; allowAt > now {
		v.retryAfter = dur(allowAt - now)
		v.remaining, v.resetAfter = p.gcraRemaining(base, now), dur(base-now)
		return tat, v
	}
	v.allowed = true
	v.remaining, v.resetAfter = p.gcraRemaining(newTAT, now), dur(newTAT-now)
	if cost == 0 {
		// A peek spends nothing; say when one unit will be available.
		v.retryAfter = dur(base - p.tau - now)
		return tat, v
	}
	return newTAT, v
}

// gcraRemaining is how many units could be admitted at now given tat:
// ⌊(τ + T − (tat − now)) / T⌋, at least zero.
func (p *params) gcraRemaining(tat, now int64) int64 {
	room := p.tau + p.emission - max(tat-now, 0)
	if room <= 0 {
		return 0
	}
	return p.perEmission.div(room)
}
