package rulestest

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"pgregory.net/rapid"
)

// tricky are names a YAML or JSON writer must quote or escape to read
// back as the same string.
var tricky = []string{
	"yes", "no", "null", "~", "true", "0x1F", "1e3", "012", "-", "- a", "a: b", "#x", "x #y",
	" lead", "trail ", "'q'", `"dq"`, "{x}", "[x]", "&a", "*a", "!tag", "%", "@", "`", "a\tb",
	"é", "日本", "🙂", `back\slash`, "<&>", "multi\nline",
}

// text draws a string of 1 to 256 bytes.
func text() *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.SampledFrom(tricky),
		rapid.StringOfN(rapid.RuneFrom(nil, unicode.L, unicode.N, unicode.P, unicode.S, unicode.Zs), 1, 24, 256),
	)
}

// pattern draws a route or descriptor value: '*' only at the end.
func pattern(t *rapid.T, label string) string {
	s := strings.ReplaceAll(text().Draw(t, label), "*", "")
	if s == "" || rapid.IntRange(0, 3).Draw(t, label+"Prefix") == 0 {
		s += "*"
	}
	return s
}

// list draws up to max values, nil when none: a rule read from a file
// has nil, not empty, lists.
func list[T any](t *rapid.T, label string, max int, draw func(*rapid.T, string) T) []T {
	n := rapid.IntRange(0, max).Draw(t, label+"Len")
	if n == 0 {
		return nil
	}
	out := make([]T, n)
	for i := range out {
		out[i] = draw(t, fmt.Sprintf("%s[%d]", label, i))
	}
	return out
}

// names draws up to max distinct names, nil when none.
func names(t *rapid.T, label string, max int) []string {
	all := list(t, label, max, func(t *rapid.T, l string) string { return text().Draw(t, l) })
	var out []string
	for _, s := range all {
		if !contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Rule draws a valid rule with the given name; its replaces are empty,
// since they must name other rules (see Rules).
func Rule(name string) *rapid.Generator[rules.Rule] {
	return rapid.Custom(func(t *rapid.T) rules.Rule {
		r := rules.Rule{Name: name, Scope: rapid.SampledFrom([]rules.Scope{rules.Global, rules.IP, rules.Tenant, rules.User, rules.Route, rules.Descriptor}).Draw(t, "scope")}
		if rapid.Bool().Draw(t, "described") {
			r.Description = text().Draw(t, "description")
		}
		r.Unlimited = r.Scope == rules.Descriptor && rapid.IntRange(0, 3).Draw(t, "unlimited") == 0
		// An unlimited rule may leave its intent out; a limit needs one.
		if !r.Unlimited || rapid.Bool().Draw(t, "intended") {
			r.Intent = rapid.SampledFrom([]lease.Intent{lease.Capacity, lease.Quota, lease.Abuse}).Draw(t, "intent")
		}
		if !r.Unlimited {
			limits(t, &r)
		}
		switch r.Scope {
		case rules.Global:
		case rules.Descriptor:
			if rapid.Bool().Draw(t, "keyed") {
				r.Key = []rules.Attr{rules.AttrDescriptor}
			}
			r.Match.Domain = text().Draw(t, "domain")
			r.Match.Descriptors = make([]rules.DescriptorEntry, rapid.IntRange(1, 3).Draw(t, "entries"))
			for i := range r.Match.Descriptors {
				e := &r.Match.Descriptors[i]
				e.Key = text().Draw(t, "entryKey")
				if rapid.Bool().Draw(t, "entryValued") {
					e.Value = pattern(t, "entryValue")
				}
			}
		default:
			attrs := rapid.Permutation([]rules.Attr{rules.AttrTenant, rules.AttrUser, rules.AttrRoute, rules.AttrIP}).Draw(t, "attrs")
			if n := rapid.IntRange(0, 4).Draw(t, "keyLen"); n > 0 {
				r.Key = attrs[:n]
			}
		}
		if r.Scope != rules.Descriptor {
			r.Match.Routes = list(t, "routes", 3, pattern)
			r.Match.Tenants = names(t, "matchTenants", 3)
			r.Match.Plans = names(t, "matchPlans", 3)
			overrides(t, &r)
		}
		if r.Algorithm == algo.TokenBucket || r.Algorithm == algo.GCRA {
			r.Burst = rapid.Int64Range(0, maxBurst(&r)).Draw(t, "burst")
		}
		r.Local = rapid.IntRange(0, 3).Draw(t, "local") == 0
		if regions := names(t, "regions", 3); len(regions) > 0 {
			r.Regions = make(map[string]float64, len(regions))
			for _, name := range regions {
				// Each at most 1/n, so that together they are at most 1.
				r.Regions[name] = rapid.Float64Range(1e-6, 1/float64(len(regions))).Draw(t, "fraction")
			}
		}
		if mayOverage(&r) && rapid.Bool().Draw(t, "overage") {
			r.Overage = &rules.Overage{UpTo: rapid.Float64Range(1.001, 4).Draw(t, "upTo")}
		}
		return r
	})
}

// mayOverage reports whether r may have overage (rules.Overage): a quota
// of a tenant's own, counted by windows, whose limit the coordinators
// know.
func mayOverage(r *rules.Rule) bool {
	if attrs := r.KeyAttrs(); len(attrs) != 1 || attrs[0] != rules.AttrTenant {
		return false
	}
	if r.Intent != lease.Quota || r.Algorithm != algo.FixedWindow && r.Algorithm != algo.SlidingWindow ||
		r.Unlimited || r.Local || r.Shadow || len(r.Regions) > 0 {
		return false
	}
	for _, p := range r.Plans {
		if p.Limit > 0 || !p.Cycle.IsZero() {
			return false
		}
	}
	return true
}

// limits draws what sets a limited rule's limit.
func limits(t *rapid.T, r *rules.Rule) {
	r.Algorithm = rapid.SampledFrom(algo.Algorithms()).Draw(t, "algorithm")
	r.Limit = rapid.Int64Range(1, 1_000_000).Draw(t, "limit")
	r.Period = time.Duration(rapid.OneOf(
		rapid.SampledFrom([]int64{int64(time.Second), int64(time.Minute), int64(90 * time.Minute), int64(24 * time.Hour)}),
		rapid.Int64Range(int64(time.Millisecond), int64(30*24*time.Hour)),
	).Draw(t, "period"))
	if r.Algorithm == algo.FixedWindow && rapid.IntRange(0, 3).Draw(t, "calendar") == 0 {
		// A period on the calendar (period: month).
		c := &rules.Cycle{Unit: rapid.SampledFrom([]algo.CalendarUnit{algo.Day, algo.Week, algo.Month}).Draw(t, "unit")}
		if c.Unit == algo.Month {
			c.AnchorDay = rapid.IntRange(0, 31).Draw(t, "anchorDay")
		}
		c.TimeZone = rapid.SampledFrom([]string{"", "UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"}).Draw(t, "timeZone")
		c.Resolve() // as a rule file's or the wire's are
		r.Period, r.Cycle = c.Unit.Nominal(), c
	}
	if rapid.Bool().Draw(t, "tolerant") {
		tol := rapid.Float64Range(0, 1).Draw(t, "tolerance")
		r.Tolerance = &tol
	}
	r.FailMode = rapid.SampledFrom([]lease.FailMode{0, lease.FailFallback, lease.FailOpen, lease.FailClosed}).Draw(t, "failMode")
	r.Shadow = rapid.IntRange(0, 3).Draw(t, "shadow") == 0
}

// maxBurst is the largest burst a bucket of the rule's refills within the
// century algo allows, at the lowest of its limits, and at most 10^6.
func maxBurst(r *rules.Rule) int64 {
	lowest := r.Limit
	for _, p := range r.Plans {
		if p.Limit > 0 {
			lowest = min(lowest, p.Limit)
		}
	}
	for _, o := range r.Tenants {
		if o.Limit > 0 {
			lowest = min(lowest, o.Limit)
		}
	}
	const century = int64(100 * 365 * 24 * time.Hour)
	return min(1_000_000, century/(int64(r.Period)/lowest)-1)
}

// overrides draws plans and tenant overrides.
func overrides(t *rapid.T, r *rules.Rule) {
	limit := func(label string) int64 {
		if rapid.Bool().Draw(t, label+"Unset") {
			return 0
		}
		return rapid.Int64Range(1, 1_000_000).Draw(t, label)
	}
	weight := rapid.OneOf(rapid.Just(0.0), rapid.SampledFrom([]float64{1, 2, 10, 0.5}), rapid.Float64Range(0, 100))
	// A plan's or a tenant's own anchor, on a calendar rule.
	anchor := func(label string) rules.Anchor {
		if r.Cycle == nil || rapid.Bool().Draw(t, label+"Unset") {
			return rules.Anchor{}
		}
		var a rules.Anchor
		if r.Cycle.Unit == algo.Month {
			a.AnchorDay = rapid.IntRange(0, 31).Draw(t, label+"Day")
		}
		a.TimeZone = rapid.SampledFrom([]string{"", "America/Los_Angeles", "Asia/Tokyo"}).Draw(t, label+"Zone")
		return a
	}
	if plans := names(t, "plans", 3); len(plans) > 0 {
		r.Plans = make(map[string]rules.Plan, len(plans))
		for _, name := range plans {
			r.Plans[name] = rules.Plan{Limit: limit("planLimit"), Weight: weight.Draw(t, "planWeight"), Rank: uint8(rapid.IntRange(0, rules.MaxRank).Draw(t, "rank")), Cycle: anchor("planCycle")}
		}
	}
	if tenants := names(t, "tenants", 3); len(tenants) > 0 {
		r.Tenants = make(map[string]rules.TenantOverride, len(tenants))
		for _, name := range tenants {
			o := rules.TenantOverride{Limit: limit("tenantLimit"), Weight: weight.Draw(t, "tenantWeight")}
			if o.Limit > 0 { // a file tenant entry's cycle goes with its limit
				o.Cycle = anchor("tenantCycle")
			}
			r.Tenants[name] = o
		}
	}
}

// Rules draws a list of up to six valid rules that rules.NewSet accepts:
// distinct names, descriptor rules matching distinct descriptors, and
// replaces naming other rules of the list.
func Rules() *rapid.Generator[[]rules.Rule] {
	return rapid.Custom(func(t *rapid.T) []rules.Rule {
		n := rapid.IntRange(0, 6).Draw(t, "rules")
		if n == 0 {
			return nil
		}
		out := make([]rules.Rule, n)
		seen := map[string]bool{}
		for i := range out {
			base := rapid.StringMatching(`[A-Za-z0-9][A-Za-z0-9_.:-]{0,20}`).Draw(t, "name")
			out[i] = Rule(fmt.Sprintf("%s-%d", base, i)).Draw(t, "rule")
			if r := &out[i]; r.Scope == rules.Descriptor {
				for k := 0; seen[matchKey(r)]; k++ {
					r.Match.Domain = fmt.Sprintf("domain-%d-%d", i, k)
				}
				seen[matchKey(r)] = true
			}
		}
		for i := range out {
			if out[i].Scope != rules.Descriptor || n == 1 {
				continue
			}
			var others []string
			for j := range out {
				if j != i {
					others = append(others, out[j].Name)
				}
			}
			out[i].Replaces = list(t, "replaces", 2, func(t *rapid.T, l string) string { return rapid.SampledFrom(others).Draw(t, l) })
		}
		return out
	})
}

func matchKey(r *rules.Rule) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d:%s;", len(r.Match.Domain), r.Match.Domain)
	for _, e := range r.Match.Descriptors {
		fmt.Fprintf(&b, "%d:%s=%d:%s;", len(e.Key), e.Key, len(e.Value), e.Value)
	}
	return b.String()
}
