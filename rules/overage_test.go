package rules

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// TestOverage: overage parses, round-trips through the rules file form
// and enforces its cap; a cap at or below the limit, on a rule that is
// not a tenant's quota counted by windows, or whose limit the
// coordinators cannot know, is refused with the field named, and notice
// thresholds may reach the cap and no further.
func TestOverage(t *testing.T) {
	const head = "rules:\n- name: q\n  scope: tenant\n  limit: 100000\n"
	const quota = "  algorithm: fixed_window\n  period: month\n  intent: quota\n"
	for _, tc := range []struct {
		name, rule string
		want       string // "" when valid
	}{
		{"monthly", quota + "  overage: {up_to: 2.0}\n", ""},
		{"sliding window", "  algorithm: sliding_window\n  period: 24h\n  intent: quota\n  overage: {up_to: 1.5}\n", ""},
		{"notices up to the cap", quota + "  overage: {up_to: 2}\n  notices: [0.8, 1, 2]\n", ""},
		{"a tenant's own limit", quota + "  overage: {up_to: 2}\n  tenants:\n    acme: {limit: 500000}\n", ""},
		{"plans of weights only", quota + "  overage: {up_to: 2}\n  plans:\n    pro: {weight: 2}\n", ""},
		{"a cap at the limit", quota + "  overage: {up_to: 1.0}\n", "overage.up_to: must be above 1, got 1"},
		{"a cap below the limit", quota + "  overage: {up_to: 0.5}\n", "overage.up_to: must be above 1, got 0.5"},
		{"no cap", quota + "  overage: {}\n", "overage.up_to: must be above 1, got 0"},
		{"not a number", quota + "  overage: {up_to: .nan}\n", "overage.up_to: must be above 1"},
		{"too high", quota + "  overage: {up_to: 101}\n", "overage.up_to: must be at most 100"},
		{"an unknown field", quota + "  overage: {up_to: 2, price: 1}\n", "price"},
		{"capacity", "  algorithm: fixed_window\n  period: 1m\n  intent: capacity\n  overage: {up_to: 2}\n", "overage: only a quota"},
		{"token bucket", "  algorithm: token_bucket\n  period: 1h\n  intent: quota\n  overage: {up_to: 2}\n", "overage: token_bucket does not count calls by window"},
		{"gcra", "  algorithm: gcra\n  period: 1h\n  intent: quota\n  overage: {up_to: 2}\n", "overage: gcra does not count calls by window"},
		{"sliding log", "  algorithm: sliding_log\n  period: 1h\n  intent: quota\n  overage: {up_to: 2}\n", "overage: sliding_log does not count calls by window"},
		{"per user", quota + "  key: [tenant, user]\n  overage: {up_to: 2}\n", "overage: only a rule keyed by tenant alone"},
		{"local", quota + "  local: true\n  overage: {up_to: 2}\n", "overage: a local rule"},
		{"shadow", quota + "  shadow: true\n  overage: {up_to: 2}\n", "overage: a shadow rule"},
		{"regions", quota + "  regions: {eu: 0.5, us: 0.5}\n  overage: {up_to: 2}\n", "overage: a rule divided among regions"},
		{"a plan's limit", quota + "  overage: {up_to: 2}\n  plans:\n    pro: {limit: 500000}\n", "plans.pro: a rule with overage has no plan limits"},
		{"a plan's cycle", quota + "  overage: {up_to: 2}\n  plans:\n    pro: {cycle: {anchor_day: 5}}\n", "plans.pro: a rule with overage has no plan limits or plan cycles"},
		{"a cap a sliding window cannot count", "  algorithm: sliding_window\n  period: 24h\n  intent: quota\n  limit: 3000000000\n  overage: {up_to: 2}\n", "overage.up_to: the cap of the limit, 6000000000"},
		{"a tenant's cap a sliding window cannot count", "  algorithm: sliding_window\n  period: 24h\n  intent: quota\n  overage: {up_to: 2}\n  tenants:\n    acme: {limit: 3000000000}\n", "tenants.acme.limit"},
		{"a notice above the cap", quota + "  overage: {up_to: 2}\n  notices: [0.8, 2.5]\n", "notices[1]: must be a fraction of the limit in (0, 2], got 2.5: the overage cap is 2 times the limit"},
		{"a notice above the limit without overage", quota + "  notices: [0.8, 1.5]\n", "notices[1]: must be a fraction of the limit in (0, 1]"},
		{"notices out of order up to the cap", quota + "  overage: {up_to: 2}\n  notices: [2, 1]\n", "notices[1]: 1 is not above 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := head + tc.rule
			if strings.Contains(tc.rule, "limit: 3000000000\n  overage") {
				text = strings.Replace(text, "  limit: 100000\n", "", 1)
			}
			rs, err := Parse("rules.yaml", []byte(text))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				var buf bytes.Buffer
				if err := WriteYAML(&buf, rs); err != nil {
					t.Fatal(err)
				}
				back, err := Parse("again.yaml", buf.Bytes())
				if err != nil || len(back) != 1 || !Equal(&back[0], &rs[0]) || back[0].Overage == nil {
					t.Fatalf("round trip: %v, %+v from\n%s", err, back, buf.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if !strings.Contains(tc.name, "unknown") && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v is not a rules.ErrInvalid", err)
			}
		})
	}
}

func TestOverageCap(t *testing.T) {
	r := Rule{Name: "q", Limit: 100000, Period: time.Hour}
	if got := r.Cap(100000); got != 100000 {
		t.Errorf("without overage: Cap = %d, want the limit", got)
	}
	for _, tc := range []struct {
		upTo  float64
		limit int64
		want  int64
	}{
		{2, 100000, 200000},
		{1.5, 7, 10}, // rounded down
		{1.01, 50, 50},
		{100, math.MaxInt64 / 2, math.MaxInt64},
		{2, 0, 0},
	} {
		r.Overage = &Overage{UpTo: tc.upTo}
		if got := r.Cap(tc.limit); got != tc.want {
			t.Errorf("Cap(%d) up to %v = %d, want %d", tc.limit, tc.upTo, got, tc.want)
		}
	}
	for _, tc := range []struct {
		used  uint64
		limit int64
		want  uint64
	}{{0, 100, 0}, {100, 100, 0}, {101, 100, 1}, {250, 100, 150}, {math.MaxUint64, 0, math.MaxUint64}} {
		if got := Excess(tc.used, tc.limit); got != tc.want {
			t.Errorf("Excess(%d, %d) = %d, want %d", tc.used, tc.limit, got, tc.want)
		}
	}
}

// TestOverrideOfOverageRule: an override's limit is enforced at its cap,
// which the rule's algorithm must count.
func TestOverrideOfOverageRule(t *testing.T) {
	rs, err := Parse("rules.yaml", []byte("rules:\n- name: q\n  scope: tenant\n  algorithm: sliding_window\n  limit: 1000\n  period: 24h\n  intent: quota\n  overage: {up_to: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := NewSet(1, rs)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if errs := set.CheckOverride(&Override{Rule: "q", Tenant: "acme", TenantOverride: TenantOverride{Limit: 2_000_000_000}}, now); len(errs) != 0 {
		t.Errorf("an override whose cap a sliding window counts: %v", errs)
	}
	errs := set.CheckOverride(&Override{Rule: "q", Tenant: "acme", TenantOverride: TenantOverride{Limit: 3_000_000_000}}, now)
	if len(errs) != 1 || errs[0].Field != "limit" {
		t.Errorf("an override whose cap a sliding window cannot count: %v, want an error on limit", errs)
	}
}
