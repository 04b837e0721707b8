package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// ruleDef is one rule the harness writes into the coordinators' rules
// file. The harness decides which rules a request matches from these
// definitions, with its own matcher (not lease/rules'), so that a bug in
// the project's matching shows as a mismatch instead of hiding in both.
type ruleDef struct {
	name, scope, algorithm, intent string
	limit                          int64
	period                         time.Duration
	burst                          int64
	local                          bool
	// match: a rule applies only if every non-empty list matches; a route
	// entry ending in * matches any suffix (docs/rules.md).
	routes, plans, tenants []string
	planLimits             map[string]int64
	tenantLimits           map[string]int64
}

// chaosRules has a rule of each intent and of several scopes: a global
// capacity rule shared by every tenant, two tenant quotas (a fixed window
// on every request and a token bucket on search routes), a per-user abuse
// rule that fails closed, a per-route capacity rule for free plans on
// export routes, and a local per-IP abuse rule.
func chaosRules() []ruleDef {
	return []ruleDef{
		{name: "api-capacity", scope: "global", algorithm: "token_bucket", intent: "capacity",
			limit: 2500, period: time.Second, burst: 1000},
		{name: "ip-abuse", scope: "ip", algorithm: "gcra", intent: "abuse",
			limit: 400, period: time.Second, burst: 200, local: true},
		{name: "tenant-window", scope: "tenant", algorithm: "fixed_window", intent: "quota",
			limit: 60, period: 5 * time.Second,
			planLimits: map[string]int64{"pro": 300}, tenantLimits: map[string]int64{"steady-00": 2000}},
		{name: "search-bucket", scope: "tenant", algorithm: "token_bucket", intent: "quota",
			limit: 8, period: time.Second, burst: 15, routes: []string{"/v1/search*"}},
		{name: "user-abuse", scope: "user", algorithm: "gcra", intent: "abuse",
			limit: 6, period: time.Second, burst: 12},
		{name: "export-route", scope: "route", algorithm: "sliding_window", intent: "capacity",
			limit: 20, period: 10 * time.Second, routes: []string{"/v1/export*"}, plans: []string{"free"}},
	}
}

// matches reports whether the rule covers a request.
func (r *ruleDef) matches(tenant, plan, route string) bool {
	if len(r.tenants) > 0 && !slices.Contains(r.tenants, tenant) {
		return false
	}
	if len(r.plans) > 0 && !slices.Contains(r.plans, plan) {
		return false
	}
	if len(r.routes) == 0 {
		return true
	}
	for _, p := range r.routes {
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
		rs.index[d.name] = i
	}
	return rs
}

// matching returns a bit per rule that covers the request.
func (rs *ruleSet) matching(tenant, plan, route string) uint64 {
	var m uint64
	for i := range rs.defs {
		if rs.defs[i].matches(tenant, plan, route) {
			m |= 1 << i
		}
	}
	return m
}

// writeRules writes the rules as a YAML rules file. Strings are written
// quoted (JSON strings are valid YAML).
func writeRules(path string, defs []ruleDef) error {
	var b strings.Builder
	b.WriteString("# Written by cmd/chaos.\nrules:\n")
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	list := func(xs []string) string {
		out := make([]string, len(xs))
		for i, x := range xs {
			out[i] = q(x)
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	limits := func(m map[string]int64) string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out := make([]string, len(keys))
		for i, k := range keys {
			out[i] = fmt.Sprintf("%s: {limit: %d}", q(k), m[k])
		}
		return "{" + strings.Join(out, ", ") + "}"
	}
	for _, r := range defs {
		fmt.Fprintf(&b, "  - name: %s\n    scope: %s\n    algorithm: %s\n    intent: %s\n    limit: %d\n    period: %s\n",
			r.name, r.scope, r.algorithm, r.intent, r.limit, r.period)
		if r.burst > 0 {
			fmt.Fprintf(&b, "    burst: %d\n", r.burst)
		}
		if r.local {
			b.WriteString("    local: true\n")
		}
		if len(r.routes)+len(r.plans)+len(r.tenants) > 0 {
			b.WriteString("    match:\n")
			for _, f := range []struct {
				name string
				xs   []string
			}{{"routes", r.routes}, {"plans", r.plans}, {"tenants", r.tenants}} {
				if len(f.xs) > 0 {
					fmt.Fprintf(&b, "      %s: %s\n", f.name, list(f.xs))
				}
			}
		}
		if len(r.planLimits) > 0 {
			fmt.Fprintf(&b, "    plans: %s\n", limits(r.planLimits))
		}
		if len(r.tenantLimits) > 0 {
			fmt.Fprintf(&b, "    tenants: %s\n", limits(r.tenantLimits))
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing rules file: %w", err)
	}
	return nil
}
