package algo

// tokenBucket decides a request against a bucket of capacity C = p.maxCost
// tokens refilled at one token per T = Period/Limit. The state is the two
// numbers of the textbook bucket, kept as integers so that a token refilled
// after exactly T is a whole token: the last refill instant (s.a) and how
// many tokens are missing from a full bucket, measured in nanoseconds of
// refill (s.b = missing·T). Refill happens here, lazily, on read:
//
//	missing = max(0, missing − (now − last)),  last = now
//	admit if missing + cost·T ≤ C·T
//
// An instant before last refills nothing, so time moving backwards never
// adds tokens.
func (p *params) tokenBucket(s *state, now, cost int64) verdict {
	last, missing := s.a, s.b
	if now > last {
		missing = max(missing-(now-last), 0)
		last = now
	}
	full := p.maxCost * p.emission
	var v verdict
	if cost > p.maxCost {
		v.retryAfter = Never
		v.remaining, v.resetAfter = p.perEmission.div(max(full-missing, 0)), dur(last+missing-now)
		return v
	}
	if need := missing + cost*p.emission; need > full {
		v.retryAfter = dur(last + need - full - now)
		v.remaining, v.resetAfter = p.perEmission.div(max(full-missing, 0)), dur(last+missing-now)
		return v
	}
	v.allowed = true
	if cost == 0 {
		v.retryAfter = dur(last + missing + p.emission - full - now)
		v.remaining, v.resetAfter = p.perEmission.div(max(full-missing, 0)), dur(last+missing-now)
		return v
	}
	missing += cost * p.emission
	s.a, s.b = last, missing
	v.remaining, v.resetAfter = p.perEmission.div(max(full-missing, 0)), dur(last+missing-now)
	return v
}
