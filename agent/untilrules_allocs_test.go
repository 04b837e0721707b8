package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/testwait"
)

// TestUntilRulesAllocatesNothing: checks decided without the cluster's
// rules, by the policy or by start-up rules, allocate nothing either. The
// agents' reports are refused once and not sent again during the runs:
// AllocsPerRun counts every goroutine's allocations.
func TestUntilRulesAllocatesNothing(t *testing.T) {
	sc := newSecuredCluster(t, clusterRulesYAML)
	tf := filepath.Join(t.TempDir(), "token")
	tokenFile(t, tf, sc.tokens["gw-2"])
	req := Request{Tenant: "acme", User: "u-42", Route: "/v1/search", IP: "203.0.113.9"}
	for _, policy := range []UntilRules{UntilRulesClosed, UntilRulesOpen, UntilRulesStatic} {
		cfg := Config{Coordinators: []string{sc.addr}, NodeID: "gw-1", Region: "eu-west", TokenFile: tf, ReportInterval: time.Hour, UntilRules: policy}
		if policy == UntilRulesStatic {
			cfg.StartupRules = fourLevels()
		}
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close(context.Background())
		testwait.For(t, 10*time.Second, "the first report refused", func() bool { return a.Status().ReportsRefused != nil })
		a.Check(req)
		if n := testing.AllocsPerRun(1000, func() { a.Check(req) }); n != 0 {
			t.Errorf("%v: %v allocations per Check", policy, n)
		}
	}
}
