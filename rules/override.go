package rules

import (
	"fmt"
	"time"
)

// Override is one tenant's override of one rule, set through the
// overrides API rather than the rule file: a customer's raised limit, or
// a temporary one for an event. An override wins over the rule file's
// tenants section for the same tenant, which wins over the tenant's plan.
type Override struct {
	Rule, Tenant string
	TenantOverride
	// Expires ends the override; the zero time means never.
	Expires time.Time
}

// MaxOverrides bounds the overrides a cluster holds: what one agent keeps
// in memory (docs/rules.md#overrides gives the bytes each costs).
const MaxOverrides = 5_000_000

// CheckOverride validates an override against the set it would apply to,
// at now (an expiry must be later). Each problem names its field: rule,
// tenant, limit, weight, cycle.anchor_day, cycle.time_zone or expires.
func (s *Set) CheckOverride(o *Override, now time.Time) Errors {
	var errs Errors
	bad := func(field, format string, args ...any) {
		errs = append(errs, &Error{Rule: o.Rule, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	r, ok := s.Get(o.Rule)
	switch {
	case o.Rule == "":
		bad("rule", "is required")
	case !ok:
		bad("rule", "%q names no rule of the set (version %d)", o.Rule, s.Version())
	case r.Scope == Descriptor:
		bad("rule", "%s is a descriptor rule: its keys have no tenant to override", o.Rule)
	case r.Scope == Global && o.Limit > 0:
		// A global rule's tenants share one total: a tenant limit would
		// be a node total of its own that no lease resizes.
		bad("limit", "%s is a global rule, whose tenants share one total: give the tenant a weight instead", o.Rule)
	}
	if ok {
		r.validateTenant(o.Tenant, o.TenantOverride, "", bad)
	} else if o.Tenant == "" || len(o.Tenant) > maxStringLen {
		bad("tenant", "tenant names must be 1–%d bytes", maxStringLen)
	}
	if o.Limit == 0 && o.Weight == 0 && o.Cycle.IsZero() {
		bad("limit", "an override sets a limit, a weight, a cycle or more (none is set)")
	}
	if !o.Expires.IsZero() && !o.Expires.After(now) {
		bad("expires", "%s is not in the future (now %s)", o.Expires.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return errs
}

// LimitWith is LimitFor with an override from the API, when ok: its limit,
// when set, wins over the rule file's tenants and the plan.
func (r *Rule) LimitWith(o TenantOverride, ok bool, tenant, plan string) int64 {
	if ok && o.Limit > 0 {
		return o.Limit
	}
	return r.LimitFor(tenant, plan)
}

// WeightWith is WeightFor with an override from the API, when ok.
func (r *Rule) WeightWith(o TenantOverride, ok bool, tenant, plan string) float64 {
	if ok && o.Weight > 0 {
		return o.Weight
	}
	return r.WeightFor(tenant, plan)
}
