package agent

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/rules"
)

// Limit is a limit the call sets rather than the rule: Requests per Per.
// Envoy's descriptor limit (RateLimitOverride) is one; a Redis
// CL.THROTTLE's max and period would be another. It replaces the limit of
// the rule the call matches, which still chooses the algorithm, burst (as
// a fraction of the limit), intent, tolerance, fail mode and regions, and
// keys the call: the key under a call's limit is the rule's key for the
// call and that limit, counted apart from the same key under another
// limit or the rule's, and coordinated across the fleet as any key of the
// rule is.
//
// Requests of 0 refuses every call, as envoyproxy/ratelimit's
// requests_per_unit of 0 does. A Per outside (0, a century] or negative
// Requests is no limit: the rule's applies, as it does to a limit the
// rule's algorithm cannot take (a sliding window counts at most 2^32-1 a
// window) and to new limits past MaxCallLimits of one rule; all three are
// counted in allot_agent_call_limit_fallbacks_total.
//
// Burst, when above 0, is the call's own burst in place of the rule's
// scaled (a Redis CL.THROTTLE's max_burst); for token_bucket and gcra
// rules, whose algorithms have one.
type Limit struct {
	Requests int64
	Per      time.Duration
	Burst    int64
}

// MaxCallLimits bounds the distinct call limits (Limit) one rule keeps a
// store for: each is a store of its own, made at its first sight and kept
// while the rule is, so a client that could choose limits freely must not
// make a store per request. Past it, a new limit is decided by the rule's
// own limit, under the rule's key.
const MaxCallLimits = 64

// maxLimitPeriod is the longest Per a Limit may have: algo's bound.
const maxLimitPeriod = 100 * 365 * 24 * time.Hour

// valid reports whether the limit is one to apply (Limit's doc).
func (l *Limit) valid() bool {
	return l != nil && l.Requests >= 0 && l.Per > 0 && l.Per <= maxLimitPeriod && l.Burst >= 0
}

// callLimits are a descriptor rule's stores for call limits, by limit:
// copy on write, so checks read them with one atomic load and a map
// lookup. A limit the rule's algorithm cannot take is kept too, with no
// store, so that a client repeating it costs a lookup, not a validation.
type callLimits struct {
	m  atomic.Pointer[map[Limit]*limitStore]
	mu sync.Mutex // writers
	// fallbacks counts the calls whose limit was decided by the rule's
	// (Limit's doc).
	fallbacks atomic.Int64
}

// callStore returns the store of a call limit, making it at its first
// sight, or nil when the rule's own store decides the call (counted).
func (rs *ruleState) callStore(lim Limit) *limitStore {
	cl := rs.calls
	if m := cl.m.Load(); m != nil {
		if st, ok := (*m)[lim]; ok {
			if st == nil {
				cl.fallbacks.Add(1) // refused before
			}
			return st
		}
	}
	if st := rs.newCallStore(lim); st != nil {
		return st
	}
	cl.fallbacks.Add(1)
	return nil
}

// newCallStore makes and publishes the store of a call limit not seen
// yet; nil when the rule takes no more, or cannot take this one (then
// published as such, within the bound).
func (rs *ruleState) newCallStore(lim Limit) *limitStore {
	if lim.Requests <= 0 || rs.makeCallStore == nil {
		return nil
	}
	cl := rs.calls
	cl.mu.Lock()
	defer cl.mu.Unlock()
	old := cl.m.Load()
	if old != nil {
		if st, ok := (*old)[lim]; ok {
			return st
		}
		if len(*old) >= MaxCallLimits {
			return nil
		}
	}
	var st *limitStore
	if r := rs.rule.WithLimitBurst(lim.Requests, lim.Per, lim.Burst); r.AlgoConfig(r.Limit).Validate() == nil {
		st, _ = rs.makeCallStore(&r, lim.Burst) // nil on an error: refused as the algorithm's
	}
	next := make(map[Limit]*limitStore, 1)
	if old != nil {
		next = make(map[Limit]*limitStore, len(*old)+1)
		for k, v := range *old {
			next[k] = v
		}
	}
	next[lim] = st
	cl.m.Store(&next)
	return st
}

// made returns the call limits' stores.
func (cl *callLimits) made() []*limitStore {
	if cl == nil {
		return nil
	}
	m := cl.m.Load()
	if m == nil {
		return nil
	}
	out := make([]*limitStore, 0, len(*m))
	for _, st := range *m {
		if st != nil {
			out = append(out, st)
		}
	}
	return out
}

// callStoreMaker makes the stores of rs's call limits: sized as the
// rule's own store, since one limit (a plan's, say) may cover as many keys.
func (a *Agent) callStoreMaker(rs *ruleState) func(*rules.Rule, int64) (*limitStore, error) {
	opts := a.keyedOptions(&rs.rule)
	return func(r *rules.Rule, burst int64) (*limitStore, error) {
		st, err := rs.newLimitStoreOf(r, r.Limit, a.cfg.Region, int(a.nodes.Load()), opts)
		if err != nil {
			return nil, err
		}
		own := *r
		st.rule = &own
		st.suffix = rules.CallLimitKeySuffix(r.Limit, r.Period, burst) // the coordinators divide it apart
		st.callBurst = burst
		st.salt = a.hasher.String(st.suffix)
		return st, nil
	}
}

// refuseAll decides a call whose limit is 0 requests: refused, never to
// fit, counted as denied (a shadow rule admits and counts it, shadowed).
// Nothing is spent, so nothing is coordinated.
func (a *Agent) refuseAll(c *compiled, rs *ruleState, desc *Descriptor, cost int64) (d Decision) {
	d = Decision{Rule: rs.rule.Name, Scope: rs.scope, Period: desc.Limit.Per, RetryAfter: -1, Fallback: rs.fallback.Load()}
	if rs.rule.Shadow {
		d.Allowed, d.RetryAfter = true, 0
	}
	if desc.Peek {
		a.countPeek(&d)
		return d
	}
	if rs.rule.Shadow {
		rs.shadowed.Add(1)
	}
	req := Request{desc: desc}
	var rh reqHashes
	th := rh.get(a, &req, rules.AttrTenant)
	slot := 2 * rs.index
	if !d.Allowed {
		slot++
	}
	for tu := c.usage.get(th, "", ""); !tu.add(slot, cost); {
		tu = c.usage.get(th, "", "")
	}
	return d
}

// keySalt mixes a call limit into a key's hash: the same key under
// another limit is another key, in the hot keys as on the wire.
func (req *Request) keySalt(h algo.Hash) algo.Hash {
	if req.lst != nil {
		return h.Then(req.lst.salt)
	}
	return h
}
