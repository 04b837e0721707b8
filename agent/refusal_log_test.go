package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRefusalStandsThroughOtherFailures: a report refused for its
// credential, then one that fails another way (no leader yet), then one
// answered: the refusal is shown until the answer, and the answer logs
// that the coordinators accept the agent again.
func TestRefusalStandsThroughOtherFailures(t *testing.T) {
	clk := newManualClock()
	r := rule("api", rules.Tenant, algo.GCRA, 100, time.Second, lease.Capacity)
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	a := engineAgent(t, eng, clk, "gw-1", "eu-west", r, func(c *Config) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: &logged, Level: hclog.Info})
	})
	deliver := func(err error) {
		x := a.prepareReport(false)
		if err != nil {
			a.deliver(x, nil, err)
		} else {
			resp, err := eng.Report(clk.Now(), x.req)
			a.deliver(x, resp, err)
		}
		clk.Advance(time.Second)
	}
	deliver(status.Error(codes.PermissionDenied, "the credential names gw-2, not gw-1"))
	if a.Status().ReportsRefused == nil {
		t.Fatal("no refusal after a PermissionDenied")
	}
	deliver(status.Error(codes.Unavailable, "no leader elected yet; retry shortly"))
	if a.Status().ReportsRefused == nil {
		t.Fatal("the refusal was forgotten by a failure that says nothing of the credential")
	}
	deliver(nil)
	if a.Status().ReportsRefused != nil {
		t.Fatal("the refusal is still shown after an answered report")
	}
	if !strings.Contains(logged.String(), "accept this agent's reports again") {
		t.Fatalf("the answer did not log that the coordinators accept the agent again:\n%s", logged.String())
	}
}
