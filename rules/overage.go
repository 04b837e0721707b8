package rules

import (
	"maps"
	"math"
	"slices"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
)

// Overage is metered overage on a quota, as plans are sold: "100,000
// calls a month, then $1 per 1,000, up to 200,000". Calls past the limit
// in force are admitted up to the cap, the limit times UpTo, and the
// ledger counts the part of each tenant's admitted units past its limit
// apart (ledger.Line.Overage), so billing prices it apart; past the cap
// calls are refused. A rule file writes it as
//
//	overage: {up_to: 2.0}
//
// The fleet enforces the cap as it would a limit: agents check against
// it and the coordinators divide leases of it, a tenant's override
// scaled alike (Cap). The limit stays the rule's: notices, balances and
// the ledger's terms measure against it.
type Overage struct {
	// UpTo is the cap, as a multiple of the limit in force: above 1, at
	// most MaxOverage.
	UpTo float64 `yaml:"up_to" json:"up_to"`
}

// MaxOverage bounds Overage.UpTo: a cap a hundred times the limit is
// past any plan's overage, and a bound keeps the cap of every valid
// limit within what the algorithms count.
const MaxOverage = 100

// Cap is the limit a quota with overage enforces for a limit in force:
// limit × up_to, rounded down and at most math.MaxInt64; the limit itself
// for a rule without overage. Agents and coordinators apply it where a
// tenant's limit (the rule's, a plan's, a tenants entry's, an override's)
// becomes what the fleet enforces, so that both divide and check the
// same cap.
func (r *Rule) Cap(limit int64) int64 {
	if r.Overage == nil || limit <= 0 {
		return limit
	}
	c := math.Floor(float64(limit) * r.Overage.UpTo)
	if !(c < math.MaxInt64) { // also a NaN of a rule not validated
		return math.MaxInt64
	}
	return max(int64(c), limit)
}

// Excess is how much of used is past limit: the overage of a tenant
// that has used used units of a cycle against limit.
func Excess(used uint64, limit int64) uint64 {
	if limit < 0 {
		limit = 0
	}
	if used <= uint64(limit) {
		return 0
	}
	return used - uint64(limit)
}

// validateOverage checks a rule's overage. Overage is counted by the
// coordinators, per tenant and cycle, against the limit in force, so
// the rule must be one whose limit is a tenant's total over a cycle the
// ledger holds, and whose limit the coordinators know: keyed by the
// tenant alone, a quota counted by windows, not local, shadow or divided
// among regions (each region's cluster would count its part against the
// whole limit), and without plans that set limits or anchor cycles (the
// coordinators keep no tenant's plan: a plan of its own limit is a rule
// of its own, matching the plan).
func (r *Rule) validateOverage(bad func(string, string, ...any)) {
	o := r.Overage
	if o == nil {
		return
	}
	switch {
	case math.IsNaN(o.UpTo) || o.UpTo <= 1:
		bad("overage.up_to", "must be above 1, got %v: the cap is the limit times up_to, and a cap at or below the limit leaves no overage (remove overage to refuse at the limit)", o.UpTo)
	case o.UpTo > MaxOverage:
		bad("overage.up_to", "must be at most %d (a cap of %d times the limit), got %v", MaxOverage, MaxOverage, o.UpTo)
	}
	if attrs := r.KeyAttrs(); len(attrs) != 1 || attrs[0] != AttrTenant {
		bad("overage", "only a rule keyed by tenant alone (scope tenant, or key [tenant]) has overage: it is a tenant's usage past its limit this cycle")
	}
	if r.Intent != 0 && r.Intent != lease.Quota {
		bad("overage", "only a quota (intent: quota) has overage: it bills calls past a paid limit, and a %s limit is no such thing", r.Intent)
	}
	if r.Algorithm != 0 && r.Algorithm != algo.FixedWindow && r.Algorithm != algo.SlidingWindow {
		bad("overage", "%s does not count calls by window, so there is no count past the limit to bill: use fixed_window (or a calendar period) or sliding_window", r.Algorithm)
	}
	switch {
	case r.Unlimited:
		bad("overage", "an unlimited rule has no limit to pass")
	case r.Local:
		bad("overage", "a local rule is enforced by each node alone; the coordinators, which count overage, do not count it")
	case r.Shadow:
		bad("overage", "a shadow rule enforces nothing; give overage to the rule it tries out once it is in force")
	case len(r.Regions) > 0:
		bad("overage", "a rule divided among regions is counted by each region's cluster apart, and overage is counted against the tenant's whole limit: not yet supported")
	}
	for _, name := range slices.Sorted(maps.Keys(r.Plans)) {
		if p := r.Plans[name]; p.Limit > 0 || !p.Cycle.IsZero() {
			bad("plans."+name, "a rule with overage has no plan limits or plan cycles: the coordinators, which count overage, do not know tenants' plans. Give the plan a rule of its own (match: {plans: [%s]}), or set its tenants' limits by override", name)
		}
	}
	// The cap of every limit the rule sets must be one its algorithm
	// counts (a sliding window counts at most 2^32-1 a window); a tenants
	// entry's is checked with the entry, as an override's is.
	if r.Limit > 0 && r.Period > 0 && r.Algorithm != 0 && o.UpTo > 1 && o.UpTo <= MaxOverage {
		if err := r.AlgoConfig(r.Cap(r.Limit)).Validate(); err != nil {
			bad("overage.up_to", "the cap of the limit, %d, is more than %s counts: %v", r.Cap(r.Limit), r.Algorithm, err)
		}
	}
}

// maxNotice is the highest notice threshold the rule may have: its cap,
// as a fraction of the limit, or the limit itself without overage (no
// usage is admitted past it, so a higher threshold would never be
// crossed).
func (r *Rule) maxNotice() float64 {
	if o := r.Overage; o != nil && o.UpTo > 1 && o.UpTo <= MaxOverage {
		return o.UpTo
	}
	return 1
}

// equalOverage reports whether two rules' overage is the same.
func equalOverage(a, b *Overage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return sameFloat(a.UpTo, b.UpTo)
}
