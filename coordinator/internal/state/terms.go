package state

import (
	"time"

	"github.com/allot-io/allot/ledger"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
)

// The terms of each ledger line (ledger.Terms): the tenant's cycle of the
// rule that the line's billing window belongs to, and the limit in force
// for the tenant, recorded as each report's usage is applied, so that an
// invoice ("acme's March cycle") is one query of the ledger and shows
// the limit the tenant had, after the rules and overrides have changed.
// They are computed from the replicated rules and overrides, and from
// the window's time and the command's: every member records the same.
//
// A line has terms when its rule limits a tenant's own total over a
// cycle the ledger can count: keyed by the tenant alone, neither local
// (each node's limit) nor unlimited, with a period of whole billing
// windows (or, on the calendar, days of whole windows). That is every
// line a tenant's balance counts. A user or route rule's limit is each
// user's or route's, a global rule's the whole service's, and a
// per-minute rate under hourly windows has no cycle a window belongs to.
//
// The coordinators keep no tenant's plan, so what depends on one is not
// recorded (zero): the limit, when the rule's plans set limits and
// neither an override nor the rule file's tenants section sets the
// tenant's; the cycle, when the rule's plans anchor cycles and neither
// sets the tenant's anchor.

// termsRule is a rule whose lines have terms, with what its plans set.
type termsRule struct {
	r                      *rules.Rule
	planLimits, planCycles bool
}

// termsIndex is the rules whose lines have terms, by name, and the
// anchored forms of them made so far (rules.Rule.Anchored, whose time
// zone is loaded once rather than at every report); both rebuilt when
// the rules change. Derived from the rules: not in snapshots.
type termsIndex struct {
	rules    map[string]*termsRule
	anchored map[anchoredKey]*rules.Rule
}

type anchoredKey struct {
	rule   string
	anchor rules.Anchor
}

// indexTermsRules notes the rules whose lines have terms, after the rules
// change.
func (s *State) indexTermsRules() {
	s.terms = termsIndex{}
	for _, r := range s.rules.Rules() {
		if attrs := r.KeyAttrs(); len(attrs) != 1 || attrs[0] != rules.AttrTenant || r.Local || r.Unlimited || r.Period <= 0 {
			continue
		}
		tr := &termsRule{r: &r}
		for _, p := range r.Plans {
			tr.planLimits = tr.planLimits || p.Limit > 0
			tr.planCycles = tr.planCycles || !p.Cycle.IsZero()
		}
		if s.terms.rules == nil {
			s.terms.rules = map[string]*termsRule{}
		}
		s.terms.rules[r.Name] = tr
	}
}

// countsCycles reports whether the ledger can count r's cycles: they are
// made of whole billing windows.
func (s *State) countsCycles(r *rules.Rule) bool {
	w := time.Duration(s.BillingWindowSeconds()) * time.Second
	if r.Cycle != nil && r.Cycle.Unit != 0 {
		return (24*time.Hour)%w == 0 // a calendar cycle starts at a midnight
	}
	return r.Period >= w && r.Period%w == 0
}

// overrideAt is tenant's override of rule from the API as agents apply
// it at now (Unix ns): none once expired, though maintenance has not
// swept it yet.
func (s *State) overrideAt(rule, tenant string, now int64) (rules.TenantOverride, bool) {
	p, ok := s.Override(rule, tenant)
	if !ok || p.GetExpiresUnixNano() != 0 && p.GetExpiresUnixNano() <= now {
		return rules.TenantOverride{}, false
	}
	return rulespb.OverrideFromProto(p).TenantOverride, true
}

// cycleIn is tenant's cycle of r holding at, with its override o when ok
// (rules.Rule.CycleAt, for a tenant on no plan), its anchored rule made
// once. Only Apply may call it: it fills the cache of anchored rules.
func (s *State) cycleIn(r *rules.Rule, o rules.TenantOverride, ok bool, tenant string, at time.Time) (start, end time.Time) {
	if a := r.AnchorFor(o, ok, tenant, ""); !a.IsZero() {
		k := anchoredKey{r.Name, a}
		ar := s.terms.anchored[k]
		if ar == nil {
			ar = r.Anchored(a)
			if s.terms.anchored == nil {
				s.terms.anchored = map[anchoredKey]*rules.Rule{}
			}
			s.terms.anchored[k] = ar
		}
		r = ar
	}
	start = r.WindowStart(at)
	return start, r.WindowEnd(start)
}

// limitIn is the limit in force for tenant under r with its override o
// when ok, and whether the state can tell it: not when it is a plan's.
func limitIn(tr *termsRule, o rules.TenantOverride, ok bool, tenant string) (int64, bool) {
	if !(ok && o.Limit > 0) && tr.r.Tenants[tenant].Limit <= 0 && tr.planLimits {
		return 0, false
	}
	return tr.r.LimitWith(o, ok, tenant, ""), true
}

// termsOf is the terms of tenant's usage under rule in the billing window
// starting at window (Unix s), applied at now (Unix ns, the proposer's
// clock): zero for a rule whose lines have none.
func (s *State) termsOf(rule, tenant string, window, now int64) ledger.Terms {
	tr := s.terms.rules[rule]
	if tr == nil || tenant == "" || !s.countsCycles(tr.r) {
		return ledger.Terms{}
	}
	var t ledger.Terms
	o, ok := s.overrideAt(rule, tenant, now)
	if !tr.planCycles || tr.r.Cycle == nil || ok && !o.Cycle.IsZero() || tr.r.Tenants[tenant].Limit > 0 {
		start, _ := s.cycleIn(tr.r, o, ok, tenant, time.Unix(window, 0))
		t.CycleStart = start.Unix()
	}
	t.Limit, _ = limitIn(tr, o, ok, tenant)
	return t
}
