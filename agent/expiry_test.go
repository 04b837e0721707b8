package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/internal/timeutil"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"github.com/prometheus/client_golang/prometheus"
)

// TestLeaseExpiriesCounted: allot_agent_lease_expiries_total counts the
// leases that ran out unrenewed and returned their key to its unleased
// share, whichever way they ran out: at an answer that did not renew
// them, or dropped as the rule went onto its fallback fail mode after a
// lease period without answers. Answers that renew leases count nothing,
// and neither does a rule that keeps its leases when cut off (fail open).
func TestLeaseExpiriesCounted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		intent lease.Intent
		// lapse lets the lease run out, starting from a leased key.
		lapse func(a *Agent, clk *timeutil.Manual)
		want  float64
	}{
		{name: "answered without a renewal", intent: lease.Quota, want: 1, lapse: func(a *Agent, clk *timeutil.Manual) {
			clk.Advance(time.Minute)
			x := a.prepareReport(false)
			a.deliver(x, &allotpb.ReportResponse{CoordinatorUnixNano: clk.Now().UnixNano()}, nil)
		}},
		{name: "cut off, fallback", intent: lease.Capacity, want: 1, lapse: func(a *Agent, clk *timeutil.Manual) {
			for range 8 {
				clk.Advance(time.Second)
				x := a.prepareReport(false)
				a.deliver(x, nil, errors.New("no coordinator"))
			}
		}},
		{name: "cut off, fail open keeps its lease", intent: lease.Quota, want: 0, lapse: func(a *Agent, clk *timeutil.Manual) {
			for range 8 {
				clk.Advance(time.Second)
				x := a.prepareReport(false)
				a.deliver(x, nil, errors.New("no coordinator"))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			clk := newManualClock()
			r := rule("api", rules.Tenant, algo.TokenBucket, 1000, time.Second, tc.intent)
			eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
			if err != nil {
				t.Fatal(err)
			}
			a := engineAgent(t, eng, clk, "gw-1", "eu-west", r, func(c *Config) { c.Registerer = reg })
			// Enough traffic for the key to ask for a lease, and reports
			// that grant and renew it.
			for range 4 {
				for range 100 {
					a.Check(Request{Tenant: "t1"})
					clk.Advance(10 * time.Millisecond)
				}
				x := a.prepareReport(false)
				resp, err := eng.Report(clk.Now(), x.req)
				a.deliver(x, resp, err)
			}
			hk := onlyHotKey(t, a)
			if !hk.leased.Load() {
				t.Fatal("the key holds no lease")
			}
			if got := gathered(t, reg, "allot_agent_lease_expiries_total", "api"); got != 0 {
				t.Fatalf("%v expiries counted while every answer renewed the lease, want 0", got)
			}
			tc.lapse(a, clk)
			if got := gathered(t, reg, "allot_agent_lease_expiries_total", "api"); got != tc.want {
				t.Errorf("allot_agent_lease_expiries_total{rule=api} = %v, want %v", got, tc.want)
			}
			if tc.want > 0 && hk.leased.Load() {
				t.Error("the key still holds the lease that ran out")
			}
		})
	}
}

// onlyHotKey is the agent's one hot key of its one rule.
func onlyHotKey(t *testing.T, a *Agent) *hotKey {
	t.Helper()
	hot := *a.rules.Load().rules[0].hot.Load()
	if len(hot) != 1 {
		t.Fatalf("%d hot keys, want 1", len(hot))
	}
	for _, hk := range hot {
		return hk
	}
	return nil
}
