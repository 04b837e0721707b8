package rules

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/allot-io/allot/algo"
)

// ErrInvalid is wrapped by every validation error, so callers can branch on
// errors.Is(err, rules.ErrInvalid).
var ErrInvalid = errors.New("rules: invalid")

// Error is a problem with one field of one rule. File and Line are set when
// the rule came from a file.
type Error struct {
	File  string
	Line  int
	Rule  string // the rule's name, or its position when it has none
	Field string // the field, as rule files spell it, e.g. "period" or "plans.pro.limit"
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("rules: ")
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Rule != "" {
		fmt.Fprintf(&b, "rule %s: ", e.Rule)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "%s: ", e.Field)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

// Errors is every problem found in a rule set.
type Errors []*Error

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap returns the individual errors, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Bounds on names. Tenant, plan and region names travel in usage reports
// and ledger lines, whose names the wire bounds too (allotpb.MaxNameLen):
// proto/rulespb's tests check that every name a valid rule holds fits
// there unchanged.
const (
	// MaxNameLen bounds the tenant, plan and region names a rule holds,
	// and its other strings.
	MaxNameLen = 256
	// MaxRuleNameLen bounds a rule's name.
	MaxRuleNameLen = 128
)

var namePattern = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,%d}$`, MaxRuleNameLen-1))

// Limits on what a rule may contain, so that a hostile or mistaken rule
// cannot make agents allocate without bound.
const (
	maxListLen   = 1000
	maxMapLen    = 10000
	maxStringLen = MaxNameLen
)

// Validate reports every problem with r.
func (r *Rule) Validate() Errors {
	var errs Errors
	bad := func(field, format string, args ...any) {
		errs = append(errs, &Error{Rule: r.Name, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	switch {
	case r.Name == "":
		bad("name", "is required")
	case !namePattern.MatchString(r.Name):
		bad("name", "%q must be 1–%d letters, digits, '.', '_', ':' or '-', starting with a letter or digit", r.Name, MaxRuleNameLen)
	}
	if !r.Scope.valid() {
		bad("scope", "is required (global, ip, tenant, user, route or descriptor)")
	}
	if len(r.Key) > 4 {
		bad("key", "names %d attributes; at most 4 (tenant, user, route, ip)", len(r.Key))
	}
	for i, a := range r.Key {
		if !a.valid() {
			bad(fmt.Sprintf("key[%d]", i), "unknown attribute %q (want tenant, user, route or ip)", a)
		} else if slices.Index(r.Key, a) != i {
			bad(fmt.Sprintf("key[%d]", i), "attribute %q listed twice", a)
		} else if (a == AttrDescriptor) != (r.Scope == Descriptor) {
			bad(fmt.Sprintf("key[%d]", i), "a descriptor rule is keyed by its descriptor alone, and only a descriptor rule by it")
		}
	}
	if r.Scope == Global && len(r.Key) > 0 {
		bad("key", "a global rule has one key for the whole service; use scope tenant, user, route or ip to key by attributes")
	}
	if r.Unlimited {
		r.validateUnlimited(bad)
	} else {
		r.validateLimit(bad)
	}
	if r.Tolerance != nil && !(*r.Tolerance >= 0 && *r.Tolerance <= 1) {
		bad("tolerance", "must be between 0 and 1 (a fraction of the limit), got %v", *r.Tolerance)
	}
	if len(r.Description) > 4*maxStringLen {
		bad("description", "is longer than %d bytes", 4*maxStringLen)
	}
	r.validateMatch(bad)
	r.validatePlans(bad)
	r.validateRegions(bad)
	r.validateOverage(bad)
	r.validateNotices(bad)
	return errs
}

// MaxNotices bounds the thresholds a rule has notices at.
const MaxNotices = 16

// validateNotices checks the thresholds: fractions of the limit in force,
// strictly increasing, none above 1 (the limit) or, with overage, its cap
// (up_to): no usage is admitted past it, so a higher threshold would never
// be crossed. Notices measure one tenant's usage this cycle, which the
// ledger holds only for a rule whose key is the tenant alone: a user or
// route rule's key divides the tenant's usage, and a global, IP or
// descriptor rule's is not a tenant's. Unlimited, local and shadow rules
// limit nothing the coordinators count against a limit.
func (r *Rule) validateNotices(bad func(string, string, ...any)) {
	if len(r.Notices) == 0 {
		return
	}
	if attrs := r.KeyAttrs(); len(attrs) != 1 || attrs[0] != AttrTenant {
		bad("notices", "only a rule keyed by tenant alone (scope tenant, or key [tenant]) has notices: they measure one tenant's usage this cycle")
	}
	switch {
	case r.Unlimited:
		bad("notices", "an unlimited rule has no limit to cross")
	case r.Local:
		bad("notices", "a local rule is enforced by each node alone; the coordinators do not count it")
	case r.Shadow:
		bad("notices", "a shadow rule enforces nothing; give notices to the rule it tries out once it is in force")
	}
	if len(r.Notices) > MaxNotices {
		bad("notices", "lists %d thresholds; at most %d", len(r.Notices), MaxNotices)
	}
	top := r.maxNotice()
	for i, f := range r.Notices {
		field := fmt.Sprintf("notices[%d]", i)
		switch {
		case !(f > 0 && f <= top) && top == 1:
			bad(field, "must be a fraction of the limit in (0, 1], got %v (no usage is admitted past the limit, so a higher threshold is never crossed)", f)
		case !(f > 0 && f <= top):
			bad(field, "must be a fraction of the limit in (0, %v], got %v: the overage cap is %v times the limit and no usage is admitted past it, so a higher threshold is never crossed", top, f, top)
		case i > 0 && !(f > r.Notices[i-1]):
			bad(field, "%v is not above %v before it: thresholds are listed in strictly increasing order", f, r.Notices[i-1])
		}
	}
}

// validateLimit checks the fields that set a limit.
func (r *Rule) validateLimit(bad func(string, string, ...any)) {
	switch {
	case r.Limit == 0:
		bad("limit", "is required and must be positive")
	case r.Limit < 0:
		bad("limit", "must be positive, got %d", r.Limit)
	}
	if r.Period <= 0 {
		if r.Period == 0 {
			bad("period", "is required (e.g. 1s, 1m, 1h)")
		} else {
			bad("period", "must be positive, got %v", r.Period)
		}
	}
	cycleOK := true
	if r.Cycle != nil {
		cycleOK = r.Cycle.validate(r.Algorithm, r.Period, bad)
	}
	if r.Algorithm == 0 {
		bad("algorithm", "is required (fixed_window, sliding_log, sliding_window, token_bucket or gcra)")
	} else if r.Limit > 0 && r.Period > 0 && cycleOK {
		if err := r.AlgoConfig(r.Limit).Validate(); err != nil {
			var ce *algo.ConfigError
			if errors.As(err, &ce) {
				bad(strings.ToLower(ce.Field), "%s", ce.Reason)
			} else {
				bad("algorithm", "%v", err)
			}
		}
	}
	if r.Intent == 0 {
		bad("intent", "is required (capacity, quota or abuse)")
	}
}

// validateUnlimited checks an unlimited rule: a descriptor rule that sets
// no limit.
func (r *Rule) validateUnlimited(bad func(string, string, ...any)) {
	if r.Scope != Descriptor {
		bad("unlimited", "only a descriptor rule can be unlimited")
	}
	for _, f := range []struct {
		field string
		set   bool
	}{{"limit", r.Limit != 0}, {"period", r.Period != 0}, {"burst", r.Burst != 0}, {"algorithm", r.Algorithm != 0}, {"shadow", r.Shadow}, {"tolerance", r.Tolerance != nil}, {"fail_mode", r.FailMode != 0}} {
		if f.set {
			bad(f.field, "an unlimited rule sets no limit, so no %s", f.field)
		}
	}
}

func (r *Rule) validateMatch(bad func(string, string, ...any)) {
	for name, list := range map[string][]string{"match.routes": r.Match.Routes, "match.tenants": r.Match.Tenants, "match.plans": r.Match.Plans} {
		if len(list) > maxListLen {
			bad(name, "has %d entries; at most %d", len(list), maxListLen)
		}
		for i, s := range list {
			if s == "" || len(s) > maxStringLen {
				bad(fmt.Sprintf("%s[%d]", name, i), "must be 1–%d bytes", maxStringLen)
			}
			if name == "match.routes" && strings.Contains(strings.TrimSuffix(s, "*"), "*") {
				bad(fmt.Sprintf("%s[%d]", name, i), "%q: '*' is allowed only at the end", s)
			}
		}
	}
	r.validateDescriptors(bad)
}

// MaxDescriptorEntries bounds the entries a descriptor rule matches.
const MaxDescriptorEntries = 16

// validateDescriptors checks a descriptor rule's match, and that no other
// rule has descriptor fields.
func (r *Rule) validateDescriptors(bad func(string, string, ...any)) {
	m := &r.Match
	if r.Scope != Descriptor {
		if m.Domain != "" || len(m.Descriptors) > 0 {
			bad("match.domain", "only a descriptor rule (scope: descriptor) matches a domain and descriptors")
		}
		if len(r.Replaces) > 0 {
			bad("replaces", "only a descriptor rule replaces others")
		}
		return
	}
	switch {
	case m.Domain == "":
		bad("match.domain", "is required for a descriptor rule (the domain Envoy sends)")
	case len(m.Domain) > maxStringLen:
		bad("match.domain", "must be at most %d bytes", maxStringLen)
	}
	if len(m.Descriptors) == 0 || len(m.Descriptors) > MaxDescriptorEntries {
		bad("match.descriptors", "must list 1–%d entries, got %d", MaxDescriptorEntries, len(m.Descriptors))
	}
	for i, e := range m.Descriptors {
		field := fmt.Sprintf("match.descriptors[%d]", i)
		if e.Key == "" || len(e.Key) > maxStringLen {
			bad(field+".key", "must be 1–%d bytes", maxStringLen)
		}
		if len(e.Value) > maxStringLen {
			bad(field+".value", "must be at most %d bytes", maxStringLen)
		}
		if strings.Contains(strings.TrimSuffix(e.Value, "*"), "*") {
			bad(field+".value", "%q: '*' is allowed only at the end", e.Value)
		}
	}
	if len(m.Routes)+len(m.Tenants)+len(m.Plans) > 0 {
		bad("match", "a descriptor rule matches descriptors only, not routes, tenants or plans")
	}
	if len(r.Plans)+len(r.Tenants) > 0 {
		bad("plans", "a descriptor rule has no tenants, so no plans or tenant overrides")
	}
	if len(r.Replaces) > maxListLen {
		bad("replaces", "has %d entries; at most %d", len(r.Replaces), maxListLen)
	}
	for i, name := range r.Replaces {
		if !namePattern.MatchString(name) || name == r.Name {
			bad(fmt.Sprintf("replaces[%d]", i), "%q must name another rule", name)
		}
	}
}

func (r *Rule) validatePlans(bad func(string, string, ...any)) {
	if len(r.Plans) > maxMapLen {
		bad("plans", "has %d entries; at most %d", len(r.Plans), maxMapLen)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Plans)) {
		p := r.Plans[name]
		field := "plans." + name
		if name == "" || len(name) > maxStringLen {
			bad(field, "plan names must be 1–%d bytes", maxStringLen)
		}
		if p.Limit < 0 {
			bad(field+".limit", "must not be negative, got %d", p.Limit)
		} else if p.Limit > 0 && r.Algorithm != 0 && r.Period > 0 {
			if err := r.AlgoConfig(p.Limit).Validate(); err != nil {
				bad(field+".limit", "%v", err)
			}
		}
		if !(p.Weight >= 0) || math.IsInf(p.Weight, 0) {
			bad(field+".weight", "must be a non-negative number, got %v", p.Weight)
		}
		if p.Rank > MaxRank {
			bad(field+".rank", "must be at most %d, got %d", MaxRank, p.Rank)
		}
		r.validateAnchor(p.Cycle, field+".cycle", bad)
	}
	if len(r.Tenants) > maxMapLen {
		bad("tenants", "has %d entries; at most %d", len(r.Tenants), maxMapLen)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Tenants)) {
		r.validateTenant(name, r.Tenants[name], "tenants."+name+".", bad)
	}
}

// validateTenant checks one tenant's override, from the rule file's
// tenants section (prefix "tenants.NAME.") or the overrides API ("").
func (r *Rule) validateTenant(name string, o TenantOverride, prefix string, bad func(string, string, ...any)) {
	if name == "" || len(name) > maxStringLen {
		bad(strings.TrimSuffix(prefix, ".")+cond(prefix == "", "tenant", ""), "tenant names must be 1–%d bytes", maxStringLen)
	}
	if o.Limit < 0 {
		bad(prefix+"limit", "must not be negative, got %d", o.Limit)
	} else if o.Limit > 0 && r.Algorithm != 0 && r.Period > 0 {
		// With overage the fleet enforces the limit's cap.
		if err := r.AlgoConfig(r.Cap(o.Limit)).Validate(); err != nil {
			bad(prefix+"limit", "%v", err)
		}
	}
	if !(o.Weight >= 0) || math.IsInf(o.Weight, 0) {
		bad(prefix+"weight", "must be a non-negative number, got %v", o.Weight)
	}
	r.validateAnchor(o.Cycle, prefix+"cycle", bad)
	if prefix != "" && o.Limit == 0 && !o.Cycle.IsZero() {
		// The rule file's tenant entry replaces the plan's, limit and
		// cycle; one without a limit would replace the plan's limit by
		// the rule's.
		bad(prefix+"cycle", "a tenants entry's cycle goes with its limit: set a limit, or anchor the tenant alone through the overrides API (allot overrides put)")
	}
}

func cond(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

func (r *Rule) validateRegions(bad func(string, string, ...any)) {
	sum := 0.0
	for _, name := range slices.Sorted(maps.Keys(r.Regions)) {
		f := r.Regions[name]
		if name == "" || len(name) > maxStringLen {
			bad("regions", "region names must be 1–%d bytes", maxStringLen)
		}
		if !(f > 0 && f <= 1) {
			bad("regions."+name, "must be a fraction in (0, 1], got %v", f)
		}
		sum += f
	}
	if sum > 1+1e-9 {
		bad("regions", "fractions add up to %v; they divide one allowance, so at most 1", sum)
	}
}
