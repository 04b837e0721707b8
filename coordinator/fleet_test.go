package coordinator

import (
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/lease/rules"
	allotpb "github.com/allot-io/allot/proto"
)

// TestFleetSizeSurvivesFailover: a new leader answers the fleet's size as
// the replicated state knows it, not the nodes it has heard from so far.
// Agents divide every unleased share by that count; answering 1, then 2,
// had the first reporters after a failover enforce the whole limit on
// every unleased key for about an interval (issue 11).
func TestFleetSizeSurvivesFailover(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	r := rules.Rule{Name: "quota", Scope: rules.Tenant, Algorithm: algo.TokenBucket, Limit: 600, Period: time.Second, Intent: lease.Quota}
	e, err := NewEngine(EngineConfig{Region: "eu", Rules: []rules.Rule{r}}, now)
	if err != nil {
		t.Fatal(err)
	}
	seq := map[string]uint64{}
	report := func(node string) uint32 {
		t.Helper()
		seq[node]++
		resp, err := e.Report(now, &allotpb.ReportRequest{
			Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: node, Incarnation: 7, Region: "eu",
			SentUnixNano: now.UnixNano(), IntervalNano: int64(time.Second),
			Usage: &allotpb.UsageBatch{Seq: seq[node], CutUnixNano: now.UnixNano(), Counts: []*allotpb.UsageCount{{Rule: "quota", Tenant: "acme", WindowUnix: now.Unix(), Admitted: 1}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetNodes()
	}
	for range 3 {
		now = now.Add(time.Second)
		for _, n := range []string{"gw-1", "gw-2", "gw-3"} {
			report(n)
		}
	}
	now = now.Add(500 * time.Millisecond)
	e.Failover(now)
	if got := report("gw-2"); got != 3 {
		t.Errorf("the new leader's first answer says %d nodes; the fleet has 3", got)
	}
	// Once learning is over, the count is the nodes heard from again: a
	// fleet that shrank is not held up by the old count for longer.
	now = now.Add(6 * time.Second)
	for range 3 {
		now = now.Add(time.Second)
		report("gw-2")
	}
	if got := report("gw-2"); got != 1 {
		t.Errorf("after learning, with one node left, the answer says %d nodes; want 1", got)
	}
}
