package coordinator

import (
	"context"
	"github.com/allot-io/allot/internal/testwait"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	allotpb "github.com/allot-io/allot/proto"
)

// TestTierClusters runs the tier on real clusters over loopback gRPC, each
// with its own Raft log: a parent and three regions, one node reporting in
// each. A tenant whose demand is all in one region is leased nearly its
// whole quota there; when its demand moves, the quota follows; the
// regions' ledgers, read together, hold every unit the nodes counted; and
// each region's status shows its link to the parent.
func TestTierClusters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four clusters")
	}
	rule := &allotpb.Rule{Name: "plan-quota", Scope: "tenant", Algorithm: "token_bucket", Limit: 900, Period: durationpb.New(time.Second),
		Burst: 900, Intent: "quota", Regions: map[string]float64{"us": 1.0 / 3, "eu": 1.0 / 3, "ap": 1.0 / 3}}
	parent := cluster(t, 1, func(c *Config) { c.Global, c.Region = true, "global" })[0]
	putRules(t, parent, rule)
	regions := map[string]*Coordinator{}
	nodes := map[string]*agentSim{}
	for _, name := range []string{"us", "eu", "ap"} {
		c := cluster(t, 1, func(c *Config) {
			c.Region, c.Parent, c.ParentInterval = name, []string{parent.GRPCAddr()}, 200*time.Millisecond
		})[0]
		putRules(t, c, rule)
		regions[name] = c
		nodes[name] = newAgentSim(t, "gw-"+name, []string{c.GRPCAddr()})
		nodes[name].region = name
	}
	var mu sync.Mutex
	rates := map[string]float64{"us": 2000} // a second's demand, per region: over the quota
	held := map[string]float64{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for name, n := range nodes {
		wg.Go(func() {
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				mu.Lock()
				rate, h := rates[name], held[name]
				mu.Unlock()
				// Usage too: each report bills what a fifth of a second
				// at the rate admits, within the lease.
				admitted := uint64(min(rate, max(h, 300)) / 5)
				resp, err := n.report(ctx, "acme", admitted, []*allotpb.KeyDemand{demand("plan-quota", "acme", rate/5, 0, h)})
				if err == nil {
					for _, l := range resp.GetLeases() {
						mu.Lock()
						held[name] = l.GetLimit()
						mu.Unlock()
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	lease := func(name string) float64 {
		mu.Lock()
		defer mu.Unlock()
		return held[name]
	}
	testwait.For(t, 20*time.Second, "us, where the demand is, to be leased nearly the whole quota", func() bool { return lease("us") >= 0.9*900 })
	mu.Lock()
	rates = map[string]float64{"eu": 2000}
	mu.Unlock()
	testwait.For(t, 20*time.Second, "the quota to follow the demand to eu", func() bool { return lease("eu") >= 0.9*900 && lease("us") <= 0.1*900 })

	st := regions["eu"].Status().GetTier()
	if st.GetRole() != "region" || st.GetLastError() != "" || st.GetLeasedKeys() != 1 || st.GetFallbackKeys() != 0 {
		t.Errorf("eu's tier status: %v", st)
	}
	if ps := parent.Status().GetTier(); ps.GetRole() != "parent" || len(ps.GetRegions()) != 3 {
		t.Errorf("the parent's tier status: %v", ps)
	}

	// The bill: every unit the nodes had acknowledged is in the ledger of
	// the region that counted it, and the regions together hold no more.
	cancel()
	wg.Wait()
	var acked, billed uint64
	for name, c := range regions {
		acked += nodes[name].acked
		resp, err := c.queryUsage(context.Background(), &allotpb.UsageQuery{Tenant: "acme", Rule: "plan-quota"})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetRecords() {
			if r.GetRegion() != name {
				t.Errorf("%s's ledger holds a line of region %s", name, r.GetRegion())
			}
			billed += r.GetAdmitted()
		}
	}
	if acked == 0 || billed != acked {
		t.Fatalf("the regions' ledgers bill %d units; the nodes had %d acknowledged", billed, acked)
	}
}

// TestTierClustersReportEarly: on real clusters, a region whose demand
// moved reports it to the parent ahead of its interval. With a parent
// interval of 16 s, and no regular exchange after each region's first, a
// tenant's quota is leased to the region its demand appears in, then
// follows the demand to another, each within a few seconds.
func TestTierClustersReportEarly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three clusters")
	}
	const interval = 16 * time.Second
	rule := &allotpb.Rule{Name: "plan-quota", Scope: "tenant", Algorithm: "token_bucket", Limit: 900, Period: durationpb.New(time.Second),
		Burst: 900, Intent: "quota", Regions: map[string]float64{"us": 0.5, "eu": 0.5}}
	// The parent's interval is the regions': a region silent for two of
	// its intervals is not present.
	parent := cluster(t, 1, func(c *Config) { c.Global, c.Region, c.ReportInterval = true, "global", interval })[0]
	putRules(t, parent, rule)
	begin := time.Now()
	var mu sync.Mutex
	rates := map[string]float64{} // a second's demand, per region
	held := map[string]float64{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, name := range []string{"us", "eu"} {
		c := cluster(t, 1, func(c *Config) {
			c.Region, c.Parent, c.ParentInterval = name, []string{parent.GRPCAddr()}, interval
		})[0]
		putRules(t, c, rule)
		n := newAgentSim(t, "gw-"+name, []string{c.GRPCAddr()})
		n.region = name
		wg.Go(func() {
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				mu.Lock()
				rate, h := rates[name], held[name]
				mu.Unlock()
				resp, err := n.report(ctx, "acme", 0, []*allotpb.KeyDemand{demand("plan-quota", "acme", rate/5, 0, h)})
				if err == nil {
					for _, l := range resp.GetLeases() {
						mu.Lock()
						changed := held[name] != l.GetLimit()
						held[name] = l.GetLimit()
						mu.Unlock()
						if changed { // the story a failure tells
							t.Logf("%s: %s holds %.1f", time.Since(begin).Round(time.Millisecond), name, l.GetLimit())
						}
					}
				} else {
					t.Logf("%s: %s's report: %v", time.Since(begin).Round(time.Millisecond), name, err)
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	lease := func(name string) float64 {
		mu.Lock()
		defer mu.Unlock()
		return held[name]
	}
	// Each region has made its first exchange, at leadership, before
	// there was any demand; its next regular one is an interval later.
	start := time.Now()
	mu.Lock()
	rates["us"] = 2000
	mu.Unlock()
	testwait.For(t, interval/2, "us, where the demand appeared, to be leased nearly the whole quota", func() bool { return lease("us") >= 0.9*900 })
	mu.Lock()
	rates = map[string]float64{"eu": 2000}
	mu.Unlock()
	testwait.For(t, interval/2, "the quota to follow the demand to eu", func() bool { return lease("eu") >= 0.9*900 && lease("us") <= 0.1*900 })
	took := time.Since(start)
	t.Logf("the two hand-overs took %v", took)
	if took >= interval {
		t.Fatalf("the two hand-overs took %v, a regular exchange's interval is %v", took, interval)
	}
}

// TestTierParentUnreachable: a region whose parent does not answer
// divides its static fraction, says so in its status, and keeps serving.
func TestTierParentUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	rule := &allotpb.Rule{Name: "plan-quota", Scope: "tenant", Algorithm: "token_bucket", Limit: 900, Period: durationpb.New(time.Second),
		Burst: 900, Intent: "quota", Regions: map[string]float64{"us": 1.0 / 3, "eu": 2.0 / 3}}
	c := cluster(t, 1, func(c *Config) {
		c.Region, c.Parent, c.ParentInterval = "us", []string{"127.0.0.1:1"}, 100*time.Millisecond
	})[0]
	putRules(t, c, rule)
	n := newAgentSim(t, "gw-us", []string{c.GRPCAddr()})
	n.region = "us"
	var got float64
	testwait.For(t, 10*time.Second, "a lease of the static fraction", func() bool {
		resp, err := n.report(context.Background(), "acme", 0, []*allotpb.KeyDemand{demand("plan-quota", "acme", 400, 0, got)})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range resp.GetLeases() {
			got = l.GetLimit()
		}
		return got > 0
	})
	if got < 300-1e-6 || got > 300+1e-6 {
		t.Fatalf("cut off from its parent, us leased %.1f; want its static third, 300", got)
	}
	testwait.For(t, 10*time.Second, "the status to show the parent not answering", func() bool {
		st := c.Status().GetTier()
		return st.GetLastError() != "" && st.GetFallbackKeys() == 1
	})
}
