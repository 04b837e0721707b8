package fleet

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Rule is one rule a harness writes into the coordinators' rules file
// (docs/rules.md).
type Rule struct {
	Name, Scope, Algorithm, Intent string
	Limit                          int64
	Period                         time.Duration
	Burst                          int64
	Local                          bool
	// Match: a rule applies only if every non-empty list matches; a route
	// entry ending in * matches any suffix (docs/rules.md).
	Routes, Plans, Tenants []string
	PlanLimits             map[string]int64
	TenantLimits           map[string]int64
}

// WriteRules writes the rules as a YAML rules file. Strings are written
// quoted (JSON strings are valid YAML).
func WriteRules(path string, defs []Rule) error {
	var b strings.Builder
	b.WriteString("# Written by internal/fleet.\nrules:\n")
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
			r.Name, r.Scope, r.Algorithm, r.Intent, r.Limit, r.Period)
		if r.Burst > 0 {
			fmt.Fprintf(&b, "    burst: %d\n", r.Burst)
		}
		if r.Local {
			b.WriteString("    local: true\n")
		}
		if len(r.Routes)+len(r.Plans)+len(r.Tenants) > 0 {
			b.WriteString("    match:\n")
			for _, f := range []struct {
				name string
				xs   []string
			}{{"routes", r.Routes}, {"plans", r.Plans}, {"tenants", r.Tenants}} {
				if len(f.xs) > 0 {
					fmt.Fprintf(&b, "      %s: %s\n", f.name, list(f.xs))
				}
			}
		}
		if len(r.PlanLimits) > 0 {
			fmt.Fprintf(&b, "    plans: %s\n", limits(r.PlanLimits))
		}
		if len(r.TenantLimits) > 0 {
			fmt.Fprintf(&b, "    tenants: %s\n", limits(r.TenantLimits))
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing rules file: %w", err)
	}
	return nil
}
