package main

import (
	"github.com/allot-io/allot/internal/fleet"
	"slices"
	"strings"
	"time"
)

// ruleDef is one rule the harness writes into the coordinators' rules
// file. The harness decides which rules a request matches from these
// definitions, with its own matcher (not package rules'), so that a bug in
// the project's matching shows as a mismatch instead of hiding in both.
type ruleDef = fleet.Rule

// chaosRules has a rule of each intent and of several scopes: a global
// capacity rule shared by every tenant, two tenant quotas (a fixed window
// on every request and a token bucket on search routes), a per-user abuse
// rule that fails closed, a per-route capacity rule for free plans on
// export routes, and a local per-IP abuse rule.
func chaosRules() []ruleDef {
	return []ruleDef{
		{Name: "api-capacity", Scope: "global", Algorithm: "token_bucket", Intent: "capacity",
			Limit: 2500, Period: time.Second, Burst: 1000},
		{Name: "ip-abuse", Scope: "ip", Algorithm: "gcra", Intent: "abuse",
			Limit: 400, Period: time.Second, Burst: 200, Local: true},
		{Name: "tenant-window", Scope: "tenant", Algorithm: "fixed_window", Intent: "quota",
			Limit: 60, Period: 5 * time.Second,
			PlanLimits: map[string]int64{"pro": 300}, TenantLimits: map[string]int64{"steady-00": 2000}},
		{Name: "search-bucket", Scope: "tenant", Algorithm: "token_bucket", Intent: "quota",
			Limit: 8, Period: time.Second, Burst: 15, Routes: []string{"/v1/search*"}},
		{Name: "user-abuse", Scope: "user", Algorithm: "gcra", Intent: "abuse",
			Limit: 6, Period: time.Second, Burst: 12},
		{Name: "export-route", Scope: "route", Algorithm: "sliding_window", Intent: "capacity",
			Limit: 20, Period: 10 * time.Second, Routes: []string{"/v1/export*"}, Plans: []string{"free"}},
		{Name: envoyRule, Scope: "tenant", Algorithm: "token_bucket", Intent: "capacity",
			Limit: envoyLimit, Period: time.Second, Tenants: []string{envoyTenant}},
	}
}

// matches reports whether the rule covers a request.
func matches(r *ruleDef, tenant, plan, route string) bool {
	if len(r.Tenants) > 0 && !slices.Contains(r.Tenants, tenant) {
		return false
	}
	if len(r.Plans) > 0 && !slices.Contains(r.Plans, plan) {
		return false
	}
	if len(r.Routes) == 0 {
		return true
	}
	for _, p := range r.Routes {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(route, prefix) {
				return true
			}
		} else if route == p {
			return true
		}
	}
	return false
}

// ruleSet is the rules by index, with their names for lookups.
type ruleSet struct {
	defs  []ruleDef
	index map[string]int
}

func newRuleSet(defs []ruleDef) *ruleSet {
	rs := &ruleSet{defs: defs, index: make(map[string]int, len(defs))}
	for i, d := range defs {
		rs.index[d.Name] = i
	}
	return rs
}

// matching returns a bit per rule that covers the request.
func (rs *ruleSet) matching(tenant, plan, route string) uint64 {
	var m uint64
	for i := range rs.defs {
		if matches(&rs.defs[i], tenant, plan, route) {
			m |= 1 << i
		}
	}
	return m
}
