package rules

import (
	"math/big"
	"testing"
	"time"
)

// ratText is an allowance as a bill writes it: exact when whole, else to
// three places.
func ratText(r *big.Rat) string {
	if r == nil {
		return ""
	}
	if r.IsInt() {
		return r.Num().String()
	}
	return r.FloatString(3)
}

func TestAllowance(t *testing.T) {
	tenantRule := &Rule{Scope: Tenant, Limit: 5, Period: time.Minute,
		Tenants: map[string]TenantOverride{"big": {Limit: 50}}}
	tests := []struct {
		name   string
		rule   *Rule
		tenant string
		window time.Duration
		want   string // "" for unknown
	}{
		{"per tenant", tenantRule, "acme", time.Hour, "300"},
		{"tenant override", tenantRule, "big", time.Hour, "3000"},
		{"fractional", &Rule{Scope: Tenant, Limit: 1, Period: 7 * time.Second}, "a", time.Minute, "8.571"},
		{"global", &Rule{Scope: Global, Limit: 20000, Period: time.Second}, "a", time.Hour, "72000000"},
		{"key is the tenant", &Rule{Scope: Route, Key: []Attr{AttrTenant}, Limit: 1, Period: time.Second}, "a", time.Minute, "60"},
		{"per user", &Rule{Scope: User, Limit: 1, Period: time.Second}, "a", time.Minute, ""},
		{"local", &Rule{Scope: Tenant, Local: true, Limit: 1, Period: time.Second}, "a", time.Minute, ""},
		{"plan limits", &Rule{Scope: Tenant, Limit: 1, Period: time.Second, Plans: map[string]Plan{"pro": {Limit: 9}}}, "a", time.Minute, ""},
		{"no window", tenantRule, "acme", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ratText(tt.rule.Allowance(tt.tenant, tt.window)); got != tt.want {
				t.Errorf("allowance = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestRegionPart: a region's part is the fraction the rules file wrote,
// exactly, and the whole allowance where the rule does not divide by
// region.
func TestRegionPart(t *testing.T) {
	divided := &Rule{Regions: map[string]float64{"eu": 0.6, "us": 0.4}}
	tests := []struct {
		name     string
		rule     *Rule
		region   string
		whole    *big.Rat
		fraction string
		part     string
	}{
		{"a region's part", divided, "eu", big.NewRat(300, 1), "0.6", "180"},
		{"exact, not 0.6's binary value", divided, "us", big.NewRat(1, 3), "0.4", "0.133"},
		{"a region given no part", divided, "ap", big.NewRat(300, 1), "0", "0"},
		{"an unknown allowance", divided, "eu", nil, "0.6", ""},
		{"not divided by region", &Rule{}, "eu", big.NewRat(300, 1), "", "300"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fraction, part := tt.rule.RegionPart(tt.region, tt.whole)
			if fraction != tt.fraction || ratText(part) != tt.part {
				t.Errorf("RegionPart = %q, %s; want %q, %s", fraction, ratText(part), tt.fraction, tt.part)
			}
		})
	}
}
