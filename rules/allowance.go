package rules

import (
	"math/big"
	"strconv"
	"time"
)

// What a rule allows, for billing: the allowance a ledger line (one
// tenant, rule, region and billing window) is billed against. Exact
// rationals, because a bill's totals must not drift as float64 sums do.

// Allowance is what the rule allows one tenant over a billing window of
// width w, in all regions together: its limit × w ÷ period, exactly, the
// tenant override's limit when the tenant has one. It is nil when a
// ledger line cannot tell: a local rule is enforced by each node alone; a
// rule keyed finer than the tenant limits each user, route or address, not
// the tenant's total; and a plan's limit depends on the tenant's plan,
// which the ledger does not record.
func (r *Rule) Allowance(tenant string, w time.Duration) *big.Rat {
	if r.Local || r.Period <= 0 || w <= 0 || !r.perTenant() {
		return nil
	}
	limit := r.Limit
	if o := r.Tenants[tenant]; o.Limit > 0 {
		limit = o.Limit
	} else {
		for _, p := range r.Plans {
			if p.Limit > 0 {
				return nil
			}
		}
	}
	num := new(big.Int).Mul(big.NewInt(limit), big.NewInt(int64(w)))
	return new(big.Rat).SetFrac(num, big.NewInt(int64(r.Period)))
}

// perTenant reports whether the rule's key is the tenant, or the whole
// service (global), so that a tenant's total is what the limit bounds.
func (r *Rule) perTenant() bool {
	switch {
	case len(r.Key) > 0:
		return len(r.Key) == 1 && r.Key[0] == AttrTenant
	case r.Scope == Tenant, r.Scope == Global:
		return true
	}
	return false
}

// RegionPart is a region's part of an allowance: the rule's fraction for
// the region as the rules file wrote it ("0.6", "0" for a region it gives
// no part), and whole times it (nil when whole is). A rule that does not
// divide by region lets each region's cluster enforce all of it: no
// fraction, and the whole allowance.
func (r *Rule) RegionPart(region string, whole *big.Rat) (string, *big.Rat) {
	if len(r.Regions) == 0 {
		return "", whole
	}
	f := r.Regions[region] // 0: this region has no part
	// The shortest decimal that reads back as f is what the rules file
	// said (0.6), where f's binary value is not.
	text := strconv.FormatFloat(f, 'g', -1, 64)
	if whole == nil {
		return text, nil
	}
	frac, ok := new(big.Rat).SetString(text)
	if !ok {
		return text, nil
	}
	return text, new(big.Rat).Mul(whole, frac)
}
