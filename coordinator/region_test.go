package coordinator

import (
	"context"
	"github.com/allot-io/allot/internal/testwait"
	"testing"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestRuleOutsideRegionIsSkipped: a rule whose regions leave out this
// coordinator's region gets no pool and no lease here, while the other
// rules are divided as usual, each with its region's part.
func TestRuleOutsideRegionIsSkipped(t *testing.T) {
	c := cluster(t, 1, nil)[0] // region eu-west
	rule := func(name string, regions map[string]float64) *allotpb.Rule {
		return &allotpb.Rule{Name: name, Scope: "tenant", Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second), Burst: 100, Intent: "capacity", Regions: regions}
	}
	putRules(t, c, rule("us-only", map[string]float64{"us-east": 1}), rule("split", map[string]float64{"eu-west": 0.25, "us-east": 0.75}), rule("everywhere", nil))
	a := newAgentSim(t, "gw-1", []string{c.GRPCAddr()})
	var leases map[string]float64
	testwait.For(t, 10*time.Second, "leases for the rules that apply here", func() bool {
		resp, err := a.report(context.Background(), "", 0, []*allotpb.KeyDemand{
			demand("us-only", "acme", 10, 0, 0), demand("split", "acme", 10, 0, 0), demand("everywhere", "acme", 10, 0, 0),
		})
		if err != nil {
			t.Fatal(err)
		}
		leases = map[string]float64{}
		for _, l := range resp.GetLeases() {
			leases[l.GetRule()] = l.GetLimit()
		}
		return len(leases) >= 2
	})
	if l, ok := leases["us-only"]; ok {
		t.Errorf("a rule that does not apply in eu-west was leased there: limit %v", l)
	}
	if leases["split"] != 250 || leases["everywhere"] != 1000 {
		t.Errorf("leases %v; want split 250 (a quarter) and everywhere 1000", leases)
	}
	if n := c.alloc.ActiveKeys(); n != 2 {
		t.Errorf("%d pools; want 2 (the rule outside the region has none)", n)
	}
}
