package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// TestManyRulesGiveBackWhatTheyPassed: with more rules than one word of
// Check's bitset holds, a request refused by the last rule is charged to
// none of the 69 it passed before it, rules 64 to 68 included.
func TestManyRulesGiveBackWhatTheyPassed(t *testing.T) {
	var rs []rules.Rule
	for i := range 69 {
		rs = append(rs, rule(fmt.Sprintf("r%02d", i), rules.Tenant, algo.FixedWindow, 3, time.Minute, lease.Quota))
	}
	last := rule("limited", rules.Tenant, algo.FixedWindow, 1, time.Minute, lease.Quota)
	last.Match.Routes = []string{"/limited"}
	a := standalone(t, newManualClock(), append(rs, last)...)

	limited := Request{Tenant: "acme", Route: "/limited"}
	if d := a.Check(limited); !d.Allowed {
		t.Fatalf("first check refused by %s", d.Rule)
	}
	for i := range 10 {
		if d := a.Check(limited); d.Allowed || d.Rule != "limited" {
			t.Fatalf("check %d: allowed %v by %q, want refused by limited", i+2, d.Allowed, d.Rule)
		}
	}
	// Each of the 69 rules spent 1 of its 3: two more pass them.
	other := Request{Tenant: "acme", Route: "/other"}
	for i := range 2 {
		if d := a.Check(other); !d.Allowed {
			t.Fatalf("check %d of /other refused by %s: a refused check was charged to the rules it passed", i+1, d.Rule)
		}
	}
	if d := a.Check(other); d.Allowed {
		t.Fatal("a fourth check admitted against limits of 3")
	}
}

// TestRulesBeyondTheBound: an agent enforces at most maxRules rules of one
// set; static rules beyond are an error from New that names the bound.
func TestRulesBeyondTheBound(t *testing.T) {
	var rs []rules.Rule
	for i := range maxRules + 1 {
		rs = append(rs, rule(fmt.Sprintf("r%04d", i), rules.Tenant, algo.GCRA, 100, time.Second, lease.Capacity))
	}
	_, err := New(Config{Rules: rs, MaxKeys: 1 << 12})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("beyond the %d rules", maxRules)) {
		t.Fatalf("New with %d rules: %v", len(rs), err)
	}
	a, err := New(Config{Rules: rs[:maxRules], MaxKeys: 1 << 12})
	if err != nil {
		t.Fatalf("New with exactly %d rules: %v", maxRules, err)
	}
	defer a.Close(context.Background())
	if d := a.Check(Request{Tenant: "acme"}); !d.Allowed {
		t.Fatalf("a set of exactly %d rules refused a first check: %+v", maxRules, d)
	}
}
