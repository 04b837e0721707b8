package rules

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
)

// Scope is the level of the hierarchy a rule belongs to. Rules are
// evaluated cheapest first: global (one key), then ip, tenant, user, route.
type Scope uint8

const (
	Global Scope = iota + 1 // the whole service: one key
	IP                      // per client address: coarse, drops floods early
	Tenant                  // per tenant: plan quotas
	User                    // per user of a tenant
	Route                   // per route of a tenant
	// Descriptor rules limit Envoy rate limit descriptors: they match a
	// domain and descriptor entries, and are keyed by the entries' values.
	Descriptor
)

var scopeNames = [...]string{Global: "global", IP: "ip", Tenant: "tenant", User: "user", Route: "route", Descriptor: "descriptor"}

func (s Scope) valid() bool { return s >= Global && s <= Descriptor }

func (s Scope) String() string {
	if s.valid() {
		return scopeNames[s]
	}
	return fmt.Sprintf("scope(%d)", uint8(s))
}

// ParseScope returns the scope a rule file names.
func ParseScope(s string) (Scope, error) {
	for i := Global; i <= Descriptor; i++ {
		if scopeNames[i] == s {
			return i, nil
		}
	}
	return 0, fmt.Errorf("unknown scope %q (want global, ip, tenant, user, route or descriptor)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (s Scope) MarshalText() ([]byte, error) {
	if !s.valid() {
		return nil, fmt.Errorf("unknown scope %d", uint8(s))
	}
	return []byte(scopeNames[s]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Scope) UnmarshalText(b []byte) error {
	v, err := ParseScope(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Attr is a request attribute that can be part of a key.
type Attr string

// The attributes a request carries.
const (
	AttrTenant Attr = "tenant"
	AttrUser   Attr = "user"
	AttrRoute  Attr = "route"
	AttrIP     Attr = "ip"
	// AttrDescriptor is the values of an Envoy descriptor's entries, in
	// order: the key of a descriptor rule.
	AttrDescriptor Attr = "descriptor"
)

func (a Attr) valid() bool {
	switch a {
	case AttrTenant, AttrUser, AttrRoute, AttrIP, AttrDescriptor:
		return true
	}
	return false
}

// DefaultKey is the key a scope uses when a rule names none.
func (s Scope) DefaultKey() []Attr {
	switch s {
	case IP:
		return []Attr{AttrIP}
	case Tenant:
		return []Attr{AttrTenant}
	case User:
		return []Attr{AttrTenant, AttrUser}
	case Route:
		return []Attr{AttrTenant, AttrRoute}
	case Descriptor:
		return []Attr{AttrDescriptor}
	}
	return nil
}

// Rule is one limit.
type Rule struct {
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	// Scope places the rule in the hierarchy and sets its default key.
	Scope Scope `yaml:"scope" json:"scope"`
	// Key lists the attributes that form the key; empty means the scope's.
	Key       []Attr         `yaml:"key,omitempty" json:"key,omitempty"`
	Algorithm algo.Algorithm `yaml:"algorithm" json:"algorithm"`
	Limit     int64          `yaml:"limit" json:"limit"`
	Period    time.Duration  `yaml:"period" json:"period"`
	// Cycle counts a fixed_window's periods on the calendar (period:
	// month); nil counts them from the Unix epoch.
	Cycle  *Cycle       `yaml:"cycle,omitempty" json:"cycle,omitempty"`
	Burst  int64        `yaml:"burst,omitempty" json:"burst,omitempty"`
	Intent lease.Intent `yaml:"intent" json:"intent"`
	// Tolerance overrides the intent's tolerance when set.
	Tolerance *float64 `yaml:"tolerance,omitempty" json:"tolerance,omitempty"`
	// FailMode overrides the intent's; zero means the intent's default.
	FailMode lease.FailMode `yaml:"fail_mode,omitempty" json:"fail_mode,omitempty"`
	Match    Match          `yaml:"match,omitempty" json:"match,omitempty"`
	// Plans give tenant plans their own limits, and for global rules their
	// weights and shedding ranks.
	Plans map[string]Plan `yaml:"plans,omitempty" json:"plans,omitempty"`
	// Tenants override individual tenants.
	Tenants map[string]TenantOverride `yaml:"tenants,omitempty" json:"tenants,omitempty"`
	// Local rules are enforced by each node alone, never coordinated.
	Local bool `yaml:"local,omitempty" json:"local,omitempty"`
	// Regions divide a global allowance among regions: region → fraction.
	Regions map[string]float64 `yaml:"regions,omitempty" json:"regions,omitempty"`
	// Shadow rules count and report what they would refuse, but admit
	// every request: a new limit is tried on live traffic this way.
	Shadow bool `yaml:"shadow,omitempty" json:"shadow,omitempty"`
	// Unlimited descriptor rules limit nothing: a descriptor they match
	// is admitted without counting. They exempt specific values from a
	// more general rule (envoyproxy/ratelimit's unlimited).
	Unlimited bool `yaml:"unlimited,omitempty" json:"unlimited,omitempty"`
	// Replaces names descriptor rules that this one replaces: when both
	// match descriptors of one Envoy request, only this one applies.
	Replaces []string `yaml:"replaces,omitempty" json:"replaces,omitempty"`
	// Notices are the thresholds, as fractions of the limit in force for
	// a tenant, whose crossing by the tenant's usage this cycle the
	// coordinators record and deliver once each (docs/billing.md,
	// "Threshold notices"), up to 1 or with overage up to its cap. Only a
	// rule keyed by tenant alone has them.
	Notices []float64 `yaml:"notices,omitempty" json:"notices,omitempty"`
	// Overage admits a quota's calls past its limit, up to a hard cap,
	// and bills them apart (overage.go); nil refuses at the limit.
	Overage *Overage `yaml:"overage,omitempty" json:"overage,omitempty"`
}

// Match restricts a rule to some requests. Empty lists match everything.
type Match struct {
	// Routes are path patterns; a trailing * matches any suffix.
	Routes  []string `yaml:"routes,omitempty" json:"routes,omitempty"`
	Tenants []string `yaml:"tenants,omitempty" json:"tenants,omitempty"`
	Plans   []string `yaml:"plans,omitempty" json:"plans,omitempty"`
	// Domain and Descriptors match Envoy rate limit descriptors; only
	// descriptor rules have them. A descriptor matches when its domain is
	// Domain and its entries, in order, are Descriptors.
	Domain      string            `yaml:"domain,omitempty" json:"domain,omitempty"`
	Descriptors []DescriptorEntry `yaml:"descriptors,omitempty" json:"descriptors,omitempty"`
}

// DescriptorEntry matches one entry of an Envoy descriptor.
type DescriptorEntry struct {
	Key string `yaml:"key" json:"key"`
	// Value is the value to match: empty matches any value, and a
	// trailing * any value with that prefix. Each distinct value has a
	// key (a counter) of its own.
	Value string `yaml:"value,omitempty" json:"value,omitempty"`
}

// Matches reports whether an entry matches a descriptor entry's key and
// value.
func (e *DescriptorEntry) Matches(key, value string) bool {
	if key != e.Key {
		return false
	}
	if e.Value == "" {
		return true
	}
	if prefix, ok := strings.CutSuffix(e.Value, "*"); ok {
		return strings.HasPrefix(value, prefix)
	}
	return value == e.Value
}

// Specificity ranks how an entry matches: 0 for an exact value, 1 for a
// prefix, 2 for any value. Where several descriptor rules match, the one
// with the most specific first entry applies, then the next entry, as
// envoyproxy/ratelimit walks its descriptor tree.
func (e *DescriptorEntry) Specificity() int {
	switch {
	case e.Value == "":
		return 2
	case strings.HasSuffix(e.Value, "*"):
		return 1
	}
	return 0
}

// Plan is a tenant plan's limit, weight and shedding rank.
type Plan struct {
	// Limit replaces the rule's limit for tenants on the plan when above 0.
	Limit int64 `yaml:"limit,omitempty" json:"limit,omitempty"`
	// Weight is the plan's weight in max-min fair sharing; 0 means 1.
	Weight float64 `yaml:"weight,omitempty" json:"weight,omitempty"`
	// Rank orders plans for shedding under a global rule: lower ranks are
	// shed first (free 0, paid 1, ...). At most MaxRank.
	Rank uint8 `yaml:"rank,omitempty" json:"rank,omitempty"`
	// Cycle anchors the plan's tenants' cycles, on a rule counted on the
	// calendar (CycleFor).
	Cycle Anchor `yaml:"cycle,omitempty" json:"cycle,omitempty"`
}

// TenantOverride changes a rule for one tenant.
type TenantOverride struct {
	Limit  int64   `yaml:"limit,omitempty" json:"limit,omitempty"`
	Weight float64 `yaml:"weight,omitempty" json:"weight,omitempty"`
	// Cycle anchors the tenant's cycles, on a rule counted on the
	// calendar: the day the customer signed up, in their time zone.
	Cycle Anchor `yaml:"cycle,omitempty" json:"cycle,omitempty"`
}

// MaxRank is the highest plan rank.
const MaxRank = 15

// KeyAttrs returns the attributes that form the rule's key.
func (r *Rule) KeyAttrs() []Attr {
	if len(r.Key) > 0 {
		return r.Key
	}
	return r.Scope.DefaultKey()
}

// Tol returns the rule's tolerance: its own, or its intent's.
func (r *Rule) Tol() float64 {
	if r.Tolerance != nil {
		return *r.Tolerance
	}
	return r.Intent.DefaultTolerance()
}

// Mode returns the rule's fail mode: its own, or its intent's.
func (r *Rule) Mode() lease.FailMode {
	if r.FailMode != 0 {
		return r.FailMode
	}
	return r.Intent.DefaultFailMode()
}

// LeavesOut reports whether the rule divides its limit among regions and
// gives region no share: a cluster or node of that region does not
// enforce it, and requests there pass it unchecked.
func (r *Rule) LeavesOut(region string) bool { return len(r.Regions) > 0 && !(r.Regions[region] > 0) }

// Fair reports whether the rule is a global rule shared by tenants, whose
// allowance is divided first among tenants by weight and priority.
func (r *Rule) Fair() bool { return r.Scope == Global }

// LimitFor returns the limit that applies to a tenant on a plan: a tenant
// override, else the plan's, else the rule's.
func (r *Rule) LimitFor(tenant, plan string) int64 {
	if o, ok := r.Tenants[tenant]; ok && o.Limit > 0 {
		return o.Limit
	}
	if p, ok := r.Plans[plan]; ok && p.Limit > 0 {
		return p.Limit
	}
	return r.Limit
}

// WeightFor returns a tenant's weight under a global rule.
func (r *Rule) WeightFor(tenant, plan string) float64 {
	if o, ok := r.Tenants[tenant]; ok && o.Weight > 0 {
		return o.Weight
	}
	if p, ok := r.Plans[plan]; ok && p.Weight > 0 {
		return p.Weight
	}
	return 1
}

// RankFor returns a plan's shedding rank.
func (r *Rule) RankFor(plan string) uint8 { return r.Plans[plan].Rank }

// RegionLimit returns the part of limit that belongs to region: the rule's
// fraction for it, or all of it when the rule does not divide by region.
func (r *Rule) RegionLimit(limit int64, region string) float64 {
	if len(r.Regions) == 0 {
		return float64(limit)
	}
	return float64(limit) * r.Regions[region]
}

// BurstFor is the rule's burst, in units, at an effective limit (a plan's,
// a tenant's, or a region's part): the rule's Burst scaled with the limit,
// except that a token bucket's zero burst means one period's worth.
func (r *Rule) BurstFor(limit float64) float64 {
	if r.Algorithm == algo.TokenBucket && r.Burst == 0 {
		return limit
	}
	return lease.BurstShare(float64(r.Limit), float64(r.Burst), limit)
}

// WithLimit is the rule as it enforces a limit set by the call rather
// than by the rule (an Envoy descriptor's limit): limit per period, with
// the rule's algorithm, intent, tolerance, fail mode and regions, and its
// burst scaled to the new limit as a plan's is (BurstFor). Plans and
// tenant overrides set limits of their own, so they do not carry over.
// Agents and coordinators derive it alike, so that both enforce and divide
// the same thing. Check the result with AlgoConfig(limit).Validate: a
// sliding window counts at most 2^32-1 a window whatever the rule's limit.
//
// WithLimitBurst is WithLimit with the call's own burst, when above 0 (a
// Redis CL.THROTTLE's max_burst), in place of the rule's scaled.
func (r *Rule) WithLimitBurst(limit int64, period time.Duration, burst int64) Rule {
	d := r.WithLimit(limit, period)
	if burst > 0 {
		d.Burst = burst
	}
	return d
}

func (r *Rule) WithLimit(limit int64, period time.Duration) Rule {
	d := *r
	d.Limit, d.Period, d.Plans, d.Tenants = limit, period, nil, nil
	if period != r.Period {
		d.Cycle = nil // a call's own period counts from the epoch
	}
	if !(r.Algorithm == algo.TokenBucket && r.Burst == 0) { // else zero: one period's worth
		d.Burst = int64(math.Round(r.BurstFor(float64(limit))))
	}
	return d
}

// Equal reports whether two rules are the same rule, field for field: as
// their wire forms compare, an empty list or map equals a missing one, a
// scope that is none of the six equals no scope, and a NaN equals a NaN.
func Equal(a, b *Rule) bool {
	return a.Name == b.Name && a.Description == b.Description &&
		a.Scope.canonical() == b.Scope.canonical() && slices.Equal(a.Key, b.Key) &&
		a.Algorithm == b.Algorithm && a.Limit == b.Limit && a.Period == b.Period && equalCycles(a.Cycle, b.Cycle) && a.Burst == b.Burst &&
		a.Intent == b.Intent && a.FailMode == b.FailMode && sameTolerance(a.Tolerance, b.Tolerance) &&
		slices.Equal(a.Match.Routes, b.Match.Routes) && slices.Equal(a.Match.Tenants, b.Match.Tenants) &&
		slices.Equal(a.Match.Plans, b.Match.Plans) && a.Match.Domain == b.Match.Domain &&
		slices.Equal(a.Match.Descriptors, b.Match.Descriptors) &&
		maps.EqualFunc(a.Plans, b.Plans, func(x, y Plan) bool {
			return x.Limit == y.Limit && sameFloat(x.Weight, y.Weight) && x.Rank == y.Rank && x.Cycle == y.Cycle
		}) &&
		maps.EqualFunc(a.Tenants, b.Tenants, func(x, y TenantOverride) bool {
			return x.Limit == y.Limit && sameFloat(x.Weight, y.Weight) && x.Cycle == y.Cycle
		}) &&
		a.Local == b.Local && maps.EqualFunc(a.Regions, b.Regions, sameFloat) &&
		a.Shadow == b.Shadow && a.Unlimited == b.Unlimited && slices.Equal(a.Replaces, b.Replaces) &&
		slices.EqualFunc(a.Notices, b.Notices, sameFloat) && equalOverage(a.Overage, b.Overage)
}

// canonical is the scope, or zero when it is none of the six.
func (s Scope) canonical() Scope {
	if s.valid() {
		return s
	}
	return 0
}

func sameTolerance(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return sameFloat(*a, *b)
}

// sameFloat is ==, except that a NaN equals a NaN.
func sameFloat(x, y float64) bool {
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.IsNaN(x) && math.IsNaN(y)
	}
	return x == y
}

// AlgoConfig returns the algorithm configuration for a limit.
func (r *Rule) AlgoConfig(limit int64) algo.Config {
	c := algo.Config{Algorithm: r.Algorithm, Limit: limit, Period: r.Period, Burst: r.Burst}
	if r.Cycle != nil {
		c.Calendar = r.Cycle.Calendar()
	}
	return c
}

// WindowStart returns the start of the rule's window holding t: on the
// calendar for a rule with a Cycle, else a multiple of Period since the
// Unix epoch, as package algo counts it. For window algorithms.
//
// (Not t.Truncate(Period): Truncate counts from year 1, and a period that
// does not divide the 62,135,596,800 s from there to the Unix epoch, 7
// minutes or 168 hours, would start its windows elsewhere than algo's.)
func (r *Rule) WindowStart(t time.Time) time.Time {
	if r.Cycle != nil && r.Cycle.Unit != 0 {
		return r.Cycle.Calendar().Start(t)
	}
	p := int64(r.Period)
	n := t.UnixNano()
	q := n / p
	if n%p < 0 {
		q-- // before the epoch: floor, as algo does
	}
	return time.Unix(0, q*p)
}

// WindowEnd returns the end of the rule's window that starts at start (a
// WindowStart): a Period later, or the calendar's next window.
func (r *Rule) WindowEnd(start time.Time) time.Time {
	if r.Cycle != nil && r.Cycle.Unit != 0 {
		return r.Cycle.Calendar().Next(start)
	}
	return start.Add(r.Period)
}

// Matches reports whether the rule covers a request with these attributes.
func (r *Rule) Matches(tenant, plan, route string) bool {
	if len(r.Match.Tenants) > 0 && !slices.Contains(r.Match.Tenants, tenant) {
		return false
	}
	if len(r.Match.Plans) > 0 && !slices.Contains(r.Match.Plans, plan) {
		return false
	}
	if len(r.Match.Routes) == 0 {
		return true
	}
	for _, p := range r.Match.Routes {
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
