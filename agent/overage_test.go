package agent

import (
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// TestOverageCapEnforced: a quota with overage admits a tenant's calls
// past its limit up to the cap, limit × up_to, and refuses past it, for
// the rule's limit, a tenants entry's and an override's alike; the
// decision's limit is the cap, the count it refuses at.
func TestOverageCapEnforced(t *testing.T) {
	clk := newManualClock()
	for _, alg := range []algo.Algorithm{algo.FixedWindow, algo.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			r := rule("plan-quota", rules.Tenant, alg, 10, time.Hour, lease.Quota)
			r.Overage = &rules.Overage{UpTo: 1.5}
			r.Tenants = map[string]rules.TenantOverride{"big": {Limit: 20}}
			a := standalone(t, clk, r)
			(&reporter{a: a}).takeOverrides(&allotpb.OverridesDelta{Version: 1, Overrides: []*allotpb.Override{
				{Rule: "plan-quota", Tenant: "raised", Limit: 30, Version: 1},
			}})
			for _, tc := range []struct {
				tenant string
				cap    int64
			}{{"acme", 15}, {"big", 30}, {"raised", 45}} {
				admitted := int64(0)
				var last Decision
				for range 2 * tc.cap {
					if last = a.Check(Request{Tenant: tc.tenant}); last.Allowed {
						admitted++
					}
				}
				if admitted != tc.cap || last.Allowed || last.Rule != "plan-quota" || last.Limit != tc.cap {
					t.Errorf("%s: admitted %d, the last %+v; want %d admitted, then refused at the cap", tc.tenant, admitted, last, tc.cap)
				}
			}
		})
	}
}
