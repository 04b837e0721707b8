// Package agenttest builds agents for the tests of the packages around the
// agent (its sidecar servers, its middleware, Envoy's services): a
// standalone agent on a manual clock, and rules in one line, so that each
// package's tests need no helpers of their own.
package agenttest

import (
	"context"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/timeutil"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// Start is the time manual clocks start at.
var Start = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// NewClock is a manual clock at Start.
func NewClock() *timeutil.Manual { return timeutil.NewManual(Start) }

// Rule is a rule in one line.
func Rule(name string, scope rules.Scope, alg algo.Algorithm, limit int64, period time.Duration, intent lease.Intent) rules.Rule {
	return rules.Rule{Name: name, Scope: scope, Algorithm: alg, Limit: limit, Period: period, Intent: intent}
}

// Standalone is an agent enforcing rs on its own, on clk (nil: the system
// clock), closed when the test ends.
func Standalone(t testing.TB, clk agent.Clock, rs ...rules.Rule) *agent.Agent {
	t.Helper()
	a, err := agent.New(agent.Config{Rules: rs, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}
