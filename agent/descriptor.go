package agent

import (
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/rules"
)

// Entry is one entry of an Envoy rate limit descriptor.
type Entry struct {
	Key, Value string
}

// Descriptor is one Envoy rate limit descriptor: ordered entries, and its
// own cost (Envoy's per-descriptor hits_addend), zero meaning the
// request's.
type Descriptor struct {
	Entries []Entry
	Cost    int64
	// Peek decides without spending: Envoy's per-descriptor hits_addend
	// of 0, a question whether the descriptor is over its limit. It is
	// answered as a request of cost 1 would be, and spends, bills and
	// counts nothing but the peek, as Request.Peek.
	Peek bool
	// Limit, when set, replaces the limit of the rule the descriptor
	// matches, for this descriptor: Envoy's per-descriptor limit
	// (RateLimitOverride). See Limit. Such a descriptor neither replaces
	// another's rule nor is replaced (rules' replaces), as in
	// envoyproxy/ratelimit, where an override is a limit of no name.
	Limit *Limit
}

// descRule is a descriptor rule as the agent looks it up: by domain, then
// by matching entries level by level.
type descRule struct {
	match    []rules.DescriptorEntry
	name     string
	replaces []string
	// index is the rule's in compiled.rules; -1 when it is not enforced
	// here (unlimited, another region's, or broken): it admits uncounted.
	index int
}

// indexDescriptors groups the set's descriptor rules by domain. Unlimited
// rules are not enforced, so they are found only here, as are the rules
// this agent does not enforce (another region's, or one it cannot build):
// what they match is admitted uncounted, not passed on to a more general
// rule that was never meant for it.
func (c *compiled) indexDescriptors() {
	enforced := make(map[string]int, len(c.rules))
	for i, rs := range c.rules {
		enforced[rs.rule.Name] = i
	}
	for _, r := range c.set.Rules() {
		if r.Scope != rules.Descriptor {
			continue
		}
		i, ok := enforced[r.Name]
		if !ok {
			i = -1
		}
		c.addDescriptor(&r, i)
	}
}

func (c *compiled) addDescriptor(r *rules.Rule, index int) {
	if c.domains == nil {
		c.domains = map[string][]descRule{}
	}
	c.domains[r.Match.Domain] = append(c.domains[r.Match.Domain], descRule{
		match: r.Match.Descriptors, name: r.Name, replaces: r.Replaces, index: index,
	})
}

// resolve finds the rule that applies to a descriptor, as
// envoyproxy/ratelimit walks its tree of descriptors: at each entry, the
// rules whose entry matches most specifically (an exact value, then the
// longest prefix, then any value) stay candidates, and a rule with as many
// entries as the descriptor is the answer. It returns nil for none.
func (c *compiled) resolve(domain string, entries []Entry) *descRule {
	cands := c.domains[domain]
	if len(cands) == 0 || len(entries) == 0 {
		return nil
	}
	var buf [64]bool // the candidates still in the walk
	var live []bool
	if len(cands) <= len(buf) {
		live = buf[:len(cands)]
	} else {
		live = make([]bool, len(cands))
	}
	for i := range live {
		live[i] = true
	}
	for level, e := range entries {
		best, bestRank, bestLen := -1, 3, -1
		for i := range cands {
			m := cands[i].match
			if !live[i] || len(m) <= level || !m[level].Matches(e.Key, e.Value) {
				live[i] = false
				continue
			}
			rank, n := m[level].Specificity(), len(m[level].Value)
			if rank < bestRank || rank == bestRank && n > bestLen {
				best, bestRank, bestLen = i, rank, n
			}
		}
		if best < 0 {
			return nil
		}
		for i := range cands {
			live[i] = live[i] && cands[i].match[level] == cands[best].match[level]
		}
	}
	for i := range cands {
		if live[i] && len(cands[i].match) == len(entries) {
			return &cands[i]
		}
	}
	return nil
}

// CheckDescriptors decides the descriptors of one Envoy rate limit request
// in domain, appending one decision per descriptor to out. Each descriptor
// is decided by the one rule that applies to it (see rules.Descriptor),
// independently of the others, as envoyproxy/ratelimit does: a descriptor
// admitted is charged even when another is refused. A descriptor no rule
// applies to is admitted with no rule named; one an unlimited rule applies
// to is admitted under that rule with Limit 0. A rule named in the Replaces
// of a rule applying to another descriptor of the request does not apply.
// A descriptor's Cost of zero means cost, and a cost of zero means 1; a
// descriptor with Peek is decided without spending. A descriptor with a
// Limit is decided by that limit under the rule that applies to it, on a
// key of its own (see Limit); with no rule, or an unlimited one, it is
// admitted as any other.
//
// The request is refused when any decision is. Only descriptor rules
// apply; Check never applies them. Without rules, Config.UntilRules
// decides each descriptor, as in Check.
func (a *Agent) CheckDescriptors(domain string, descs []Descriptor, cost int64, out []Decision) []Decision {
	c := a.rules.Load()
	if c == nil {
		for i := range descs {
			var d Decision
			if descs[i].Peek {
				a.untilRules(&d)
				a.countPeek(&d)
			} else {
				a.noRules(&d)
			}
			out = append(out, d)
		}
		return out
	}
	if c.standIn {
		a.countStandIn(c)
	}
	if len(c.domains[domain]) == 0 {
		for i := range descs {
			out = append(out, Decision{Allowed: true})
			if descs[i].Peek {
				a.countPeek(&out[len(out)-1])
			}
		}
		return out
	}
	var stack [8]*descRule
	found := stack[:0]
	replaced := false
	for _, d := range descs {
		dr := c.resolve(domain, d.Entries)
		found = append(found, dr)
		replaced = replaced || dr != nil && len(dr.replaces) > 0 && !d.Limit.valid()
	}
	if replaced {
		dropReplaced(found, descs)
	}
	local := a.clock.local()
	now := newInstants(local, local+a.clock.offset.Load())
	for i, d := range descs {
		dr := found[i]
		switch {
		case dr == nil:
			out = append(out, Decision{Allowed: true})
		case dr.index < 0:
			out = append(out, Decision{Allowed: true, Rule: dr.name, Scope: "descriptor"})
		case d.Peek:
			rs := c.rules[dr.index]
			out = append(out, a.decideDescriptor(c, rs, &descs[i], 1, rs.at(&now), opPeek))
			continue // counted
		default:
			n := d.Cost
			if n <= 0 {
				n = cost
			}
			if n <= 0 {
				n = 1
			}
			rs := c.rules[dr.index]
			out = append(out, a.decideDescriptor(c, rs, &descs[i], n, rs.at(&now), opSpend))
			continue
		}
		if d.Peek {
			a.countPeek(&out[len(out)-1])
		}
	}
	return out
}

// dropReplaced clears the rules that another found rule replaces. A
// descriptor with a limit of its own takes no part.
func dropReplaced(found []*descRule, descs []Descriptor) {
	var gone []string
	for i, dr := range found {
		if dr != nil && !descs[i].Limit.valid() {
			gone = append(gone, dr.replaces...)
		}
	}
	for i, dr := range found {
		if dr == nil || descs[i].Limit.valid() {
			continue
		}
		for _, name := range gone {
			if dr.name == name {
				found[i] = nil
				break
			}
		}
	}
}

// callLimit resolves a descriptor's own limit under rs: the store of its
// keys (nil: the rule's own), and whether it refuses every call.
func (rs *ruleState) callLimit(desc *Descriptor) (st *limitStore, none bool) {
	if desc.Limit == nil {
		return nil, false
	}
	if !desc.Limit.valid() || rs.calls == nil {
		if rs.calls != nil {
			rs.calls.fallbacks.Add(1)
		}
		return nil, false
	}
	if desc.Limit.Requests == 0 {
		return nil, true
	}
	return rs.callStore(*desc.Limit), false
}

// decideDescriptor decides one descriptor under its rule and counts it
// (opSpend), or answers as it would be decided, counting only the peek
// (opPeek, at a cost of 1, as Check answers a peek).
func (a *Agent) decideDescriptor(c *compiled, rs *ruleState, desc *Descriptor, cost int64, now time.Time, o op) (d Decision) {
	if cost > MaxCost {
		a.invalid.Add(1)
		d.RetryAfter = -1
		return d
	}
	lst, none := rs.callLimit(desc)
	if none {
		return a.refuseAll(c, rs, desc, cost)
	}
	req := Request{desc: desc, lst: lst}
	var rh reqHashes
	r := rs.decide(a, &req, &rh, now, cost, o)
	if !r.allowed() && rs.rule.Shadow {
		if o == opSpend {
			rs.shadowed.Add(1)
		}
		r = result{remaining: 0, limit: r.limit, reset: r.reset}
	}
	a.fill(&d, rs, &req, r)
	if o == opPeek {
		a.countPeek(&d)
		return d
	}
	th := rh.get(a, &req, rules.AttrTenant)
	slot := 2 * rs.index
	if !r.allowed() {
		slot++
	}
	for tu := c.usage.get(th, "", ""); !tu.add(slot, cost); {
		tu = c.usage.get(th, "", "")
	}
	return d
}

// descriptorHash hashes a descriptor's values in order.
func (a *Agent) descriptorHash(entries []Entry) algo.Hash {
	if len(entries) == 0 {
		return a.hasher.String("")
	}
	h := a.hasher.String(entries[0].Value)
	for _, e := range entries[1:] {
		h = h.Then(a.hasher.String(e.Value))
	}
	return h
}
