package allocator

import (
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// resetNode is an agent enforcing a window quota's lease as the agent
// does: its lease is what it may admit in the window, and a key reset
// starts its count afresh while it keeps the lease (agent/resets.go).
type resetNode struct {
	name       string
	held, next float64
	epoch, seq uint64
	resets     uint64  // the resets version it follows
	spent      float64 // in the window, since the last reset
	denied     float64 // since the last report
	admitted   float64 // since the last report
}

// spend admits what its lease leaves of want and returns it.
func (n *resetNode) spend(want float64) float64 {
	got := max(0, min(want, n.held-n.spent))
	n.spent += got
	n.admitted += got
	n.denied += want - got
	return got
}

func (n *resetNode) report(t *testing.T, e *Engine, now, window time.Time) {
	t.Helper()
	resp, err := e.Report(now, &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: n.name, Incarnation: 1, Region: "eu",
		SentUnixNano: now.UnixNano(), IntervalNano: int64(time.Second), ResetsVersion: n.resets, ResetsFollowing: true,
		Demand: []*allotpb.KeyDemand{{Rule: "quota", Key: "acme", Tenant: "acme", Admitted: n.admitted, Denied: n.denied,
			Held: n.held, NextHeld: n.next, HeldEpoch: n.epoch, HeldSeq: n.seq, Committed: n.spent, WindowUnixNano: window.UnixNano()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.admitted, n.denied = 0, 0
	for _, l := range resp.GetLeases() {
		n.held, n.next, n.epoch, n.seq = l.GetLimit(), l.GetNextLimit(), l.GetEpoch(), l.GetSeq()
	}
}

// TestResetKeepsLeasesCounted: a key reset forgets what the nodes spent
// in the window, not what they hold. A node slow to hear of the reset
// (its reports late, or failing, on a loaded machine) still holds its
// lease and, once it hears, spends it again from zero; the division must
// go on counting that lease until the node reports holding less, or the
// node that reported first is handed the whole quota on top of it. With
// the pool dropped at the reset, a quota of 10 over two agents admitted
// 14 after a reset (TestResetRestoresQuota, under load).
func TestResetKeepsLeasesCounted(t *testing.T) {
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	r := rules.Rule{Name: "quota", Scope: rules.Tenant, Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour, Intent: lease.Quota}
	e, err := NewEngine(EngineConfig{Region: "eu", Rules: []rules.Rule{r}}, start)
	if err != nil {
		t.Fatal(err)
	}
	window := start.Truncate(time.Hour)
	a, b := &resetNode{name: "gw-1"}, &resetNode{name: "gw-2"}
	now := start
	step := func(nodes ...*resetNode) {
		now = now.Add(time.Second)
		for _, n := range nodes {
			n.report(t, e, now, window)
		}
		e.Round(now)
	}
	// Both report, are leased and spend the whole quota.
	before := 0.0
	for range 6 {
		step(a, b)
		before += a.spend(3) + b.spend(3)
	}
	if before != 10 || a.held+b.held != 10 {
		t.Fatalf("before the reset: admitted %v, leases %v + %v; want the quota of 10", before, a.held, b.held)
	}
	bHeld := b.held

	// The reset: the coordinators act on it at once, gw-1 hears of it in
	// its next answer, gw-2 only after two more report intervals.
	e.alloc.ResetPools(&allotpb.Reset{Rule: "quota", Key: "acme", Tenant: "acme"}, true)
	after := 0.0
	a.spent = 0
	for range 3 {
		step(a)
		after += a.spend(5) + b.spend(5)
	}
	if a.held > 10-bHeld {
		t.Errorf("while gw-2 had not reported since the reset, gw-1 was leased %v; gw-2 still holds %v of the quota of 10", a.held, bHeld)
	}
	b.spent = 0
	for range 6 {
		step(a, b)
		after += a.spend(5) + b.spend(5)
	}
	if after > 10 {
		t.Errorf("after the reset the fleet admitted %v of a quota of 10 (gw-1 leased %v, gw-2 %v)", after, a.held, b.held)
	}
	if after < 10 {
		t.Errorf("after the reset the fleet admitted %v of a quota of 10: the reset should give the whole quota back (gw-1 leased %v, gw-2 %v)", after, a.held, b.held)
	}
}

// TestResetAfterTheNodesHeardOfIt: the leader forgets what a reset key's
// pool counted as spent a moment after the reset is committed, and a node
// can hear of the reset in that moment (an answer built from the state
// that holds it), start its count afresh, spend, and report it. What it
// spent since the reset is not forgotten with what it spent before: a
// node's count is forgotten only if its last report predates the reset
// (its resets version). Forgetting it let a quota of 10 over two agents
// admit 11 and 14 after a reset, under load (agent.TestResetRestoresQuota).
func TestResetAfterTheNodesHeardOfIt(t *testing.T) {
	start := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	r := rules.Rule{Name: "quota", Scope: rules.Tenant, Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour, Intent: lease.Quota}
	e, err := NewEngine(EngineConfig{Region: "eu", Rules: []rules.Rule{r}}, start)
	if err != nil {
		t.Fatal(err)
	}
	window := start.Truncate(time.Hour)
	a, b := &resetNode{name: "gw-1"}, &resetNode{name: "gw-2"}
	now := start
	step := func(nodes ...*resetNode) {
		now = now.Add(time.Second)
		for _, n := range nodes {
			n.report(t, e, now, window)
		}
		e.Round(now)
	}
	before := 0.0
	for range 6 {
		step(a, b)
		before += a.spend(3) + b.spend(3)
	}
	if before != 10 {
		t.Fatalf("before the reset the fleet admitted %v of a quota of 10", before)
	}
	// The reset is committed (version 1); gw-1 hears of it before the
	// leader forgets what its pool counted, spends its lease afresh and
	// reports it.
	a.resets, a.spent = 1, 0
	after := a.spend(10)
	step(a)
	e.alloc.ResetPools(&allotpb.Reset{Rule: "quota", Key: "acme", Tenant: "acme", Version: 1}, true)
	b.resets, b.spent = 1, 0
	for range 6 {
		step(a, b)
		after += a.spend(5) + b.spend(5)
	}
	if after > 10 {
		t.Errorf("after the reset the fleet admitted %v of a quota of 10 (gw-1 leased %v, gw-2 %v)", after, a.held, b.held)
	}
	if after < 10 {
		t.Errorf("after the reset the fleet admitted %v of a quota of 10; the reset gives the whole quota back", after)
	}
}
