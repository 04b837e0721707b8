package agent

import (
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// TestShadowRuleAdmits: a shadow rule counts what it would refuse and
// admits it, while the rules after it still decide; the request is
// charged to the shadow rule as admitted.
func TestShadowRuleAdmits(t *testing.T) {
	clk := newManualClock()
	trial := rule("trial", rules.Tenant, algo.FixedWindow, 2, time.Minute, lease.Quota)
	trial.Shadow = true
	a := standalone(t, clk, trial, rule("per-user", rules.User, algo.FixedWindow, 4, time.Minute, lease.Capacity))
	req := Request{Tenant: "acme", User: "ann"}
	for i := range 4 {
		if d := a.Check(req); !d.Allowed {
			t.Fatalf("check %d refused by %s: a shadow rule must not refuse", i+1, d.Rule)
		}
	}
	if d := a.Check(req); d.Allowed || d.Rule != "per-user" {
		t.Fatalf("the fifth check: %+v, want refused by per-user", d)
	}
	c := a.rules.Load()
	for _, rs := range c.rules {
		if rs.rule.Name == "trial" && rs.shadowed.Load() != 3 {
			t.Errorf("trial would have refused %d, want 3 (checks 3 to 5)", rs.shadowed.Load())
		}
	}
	live := c.usage.live()
	for i, rs := range c.rules {
		if rs.rule.Name == "trial" && (live[2*i] != 4 || live[2*i+1] != 0) {
			t.Errorf("trial counted %d admitted, %d denied; want 4, 0", live[2*i], live[2*i+1])
		}
	}
}
