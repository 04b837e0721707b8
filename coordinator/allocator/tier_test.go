package allocator

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// world is a parent engine and three regions' engines, each region with
// one node reporting tenant acme's demand, stepped by hand a second at a
// time.
type world struct {
	t       *testing.T
	now     time.Time
	parent  *Engine
	regions map[string]*Engine
	nodes   map[string]*engineNode
	// cut holds the regions that cannot reach the parent; dropped, those
	// whose node no longer reports acme's key (its traffic long gone, it
	// gave its lease up).
	cut, dropped map[string]bool
}

var worldRegions = []string{"us", "eu", "ap"}

func newWorld(t *testing.T, limit int64) *world {
	t.Helper()
	r := rules.Rule{Name: "quota", Scope: rules.Tenant, Algorithm: algo.TokenBucket, Limit: limit, Period: time.Second,
		Intent: lease.Quota, Regions: map[string]float64{"us": 1.0 / 3, "eu": 1.0 / 3, "ap": 1.0 / 3}}
	w := &world{t: t, now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), regions: map[string]*Engine{}, nodes: map[string]*engineNode{}, cut: map[string]bool{},
		dropped: map[string]bool{}}
	var err error
	if w.parent, err = NewEngine(EngineConfig{Global: true, Rules: []rules.Rule{r}}, w.now); err != nil {
		t.Fatal(err)
	}
	for _, name := range worldRegions {
		if w.regions[name], err = NewEngine(EngineConfig{Region: name, Parent: true, Rules: []rules.Rule{r}}, w.now); err != nil {
			t.Fatal(err)
		}
		w.nodes[name] = &engineNode{name: "gw-" + name}
	}
	return w
}

// step advances a second: each region's node reports its demand (a
// tenant's rate in that region), each region reports to the parent unless
// cut off, and every engine runs its round.
func (w *world) step(rates map[string]float64) {
	w.t.Helper()
	w.now = w.now.Add(time.Second)
	for _, name := range worldRegions {
		w.nodeReport(name, rates[name])
	}
	for _, name := range worldRegions {
		e := w.regions[name]
		if !w.cut[name] {
			resp, err := w.parent.Report(w.now, e.RegionReport(w.now, time.Second))
			if err != nil {
				w.t.Fatal(err)
			}
			e.ApplyParent(w.now, resp)
		}
		e.Round(w.now)
	}
	w.parent.Round(w.now)
}

// nodeReport has a region's node report a second of acme's demand at
// rate to its region's cluster, at the world's time, and take its lease.
func (w *world) nodeReport(name string, rate float64) {
	w.t.Helper()
	n := w.nodes[name]
	req := &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: n.name, Incarnation: 1, Region: name,
		SentUnixNano: w.now.UnixNano(), IntervalNano: int64(time.Second),
		Demand: []*allotpb.KeyDemand{{Rule: "quota", Key: "acme", Tenant: "acme", Admitted: rate, Held: n.held, HeldEpoch: n.epoch, HeldSeq: n.seq}},
	}
	if w.dropped[name] {
		req.Demand = nil
	}
	resp, err := w.regions[name].Report(w.now, req)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, l := range resp.GetLeases() {
		n.held, n.epoch, n.seq = l.GetLimit(), l.GetEpoch(), l.GetSeq()
	}
}

// regionLimit is what a region's cluster divides for acme now.
func (w *world) regionLimit(name string) float64 {
	e := w.regions[name]
	e.mu.Lock()
	defer e.mu.Unlock()
	sh := e.alloc.shard(poolKey{"quota", "acme"})
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if p := sh.pools[poolKey{"quota", "acme"}]; p != nil {
		return p.limit
	}
	return 0
}

// withinQuota fails the test when the regions together divide more than
// the quota of 900 and its 5% tolerance.
func (w *world) withinQuota(when string) {
	w.t.Helper()
	sum := 0.0
	for _, name := range worldRegions {
		sum += w.regionLimit(name)
	}
	if sum > 900*1.05+1e-6 {
		w.t.Fatalf("%s: the regions divide %.1f of a quota of 900", when, sum)
	}
}

// TestTierFollowsDemand: a tenant whose traffic is all in one region gets
// the whole of its global quota there, not the region's third; when the
// traffic moves to another region, the quota follows within a few
// exchanges; and the regions' parts never add up to more than the quota
// and its tolerance.
func TestTierFollowsDemand(t *testing.T) {
	w := newWorld(t, 900)
	for i := range 10 {
		w.step(map[string]float64{"us": 2000})
		w.withinQuota(fmt.Sprintf("us busy, second %d", i+1))
	}
	if got := w.regionLimit("us"); got < 0.95*900 {
		t.Fatalf("us, where all the traffic is, divides %.1f of 900 (its static third is 300)", got)
	}
	if w.nodes["us"].held < 0.9*900 {
		t.Fatalf("the busy node holds %.1f of 900", w.nodes["us"].held)
	}
	moved := -1
	for i := range 10 {
		w.step(map[string]float64{"eu": 2000})
		w.withinQuota("after the move")
		if moved < 0 && w.regionLimit("eu") >= 0.95*900 {
			moved = i + 1
		}
	}
	if moved < 0 || moved > 4 {
		t.Fatalf("eu divides %.1f of 900 ten seconds after the traffic moved there (reached 95%% after %d)", w.regionLimit("eu"), moved)
	}
	if got := w.regionLimit("us"); got > 0.1*900 {
		t.Fatalf("us still divides %.1f after its traffic left", got)
	}
}

// TestTierForgottenKey: a region whose nodes gave up a key their traffic
// left long ago, and whose cluster forgot it, still reports its other
// keys: it is not on its static fraction of the forgotten key, and the
// parent keeps nothing of it out of what the region the traffic moved to
// divides.
func TestTierForgottenKey(t *testing.T) {
	w := newWorld(t, 900)
	for range 10 {
		w.step(map[string]float64{"us": 2000})
	}
	for range 10 {
		w.step(map[string]float64{"eu": 2000})
	}
	w.dropped["us"] = true
	for i := range 30 {
		w.step(map[string]float64{"eu": 2000})
		w.withinQuota(fmt.Sprintf("second %d after us forgot the key", i+1))
		if got := w.regionLimit("eu"); got < 0.95*900 {
			t.Fatalf("second %d after us forgot the key: eu, where all the traffic is, divides %.1f of 900", i+1, got)
		}
	}
}

// TestTierPartition: a region cut off from the parent keeps its lease
// until it expires, then divides its static fraction; the parent, having
// heard nothing from it for a lease period, keeps that fraction out of
// what it divides among the others, so the regions together stay within
// the quota and its tolerance throughout.
func TestTierPartition(t *testing.T) {
	w := newWorld(t, 900)
	busy := map[string]float64{"us": 1000, "eu": 1000, "ap": 1000}
	for range 8 {
		w.step(busy)
	}
	w.cut["ap"] = true
	fallback := false
	for i := range 30 {
		w.step(busy)
		w.withinQuota(fmt.Sprintf("second %d of the partition", i+1))
		if w.regions["ap"].ParentFallbacks(w.now) > 0 {
			fallback = true
			if got := w.regionLimit("ap"); got < 300-1e-6 {
				t.Fatalf("ap on its fallback divides %.1f, below its static third", got)
			}
		}
	}
	if !fallback {
		t.Fatal("ap never fell back to its static fraction")
	}
	delete(w.cut, "ap")
	for range 8 {
		w.step(busy)
	}
	if n := w.regions["ap"].ParentFallbacks(w.now); n != 0 {
		t.Fatalf("ap still on its fallback after the partition healed (%d keys)", n)
	}
}

// TestTierParentFailover: a new parent leader knows nothing of what its
// predecessor granted. It learns for a lease period from what the regions
// report holding, so that while demand moves between regions during its
// learning the regions together never hold more than the quota and its
// tolerance; afterwards the quota follows the demand again.
func TestTierParentFailover(t *testing.T) {
	w := newWorld(t, 900)
	for range 8 {
		w.step(map[string]float64{"us": 1500, "eu": 500})
		w.withinQuota("before the failover")
	}
	w.parent.Failover(w.now)
	for i := range 10 {
		w.step(map[string]float64{"us": 200, "eu": 1800})
		w.withinQuota(fmt.Sprintf("second %d after the failover", i+1))
	}
	// Contended, the quota is divided in proportion beyond a floor each
	// (lease.Allocate): eu's part of 900 is 754.2, us's 145.8.
	if got := w.regionLimit("eu"); got < 740 {
		t.Fatalf("ten seconds after the failover eu, with nine tenths of the demand, divides %.1f of 900; want its 754", got)
	}
}

// TestTierEarlyReports: a region's leader reports a key to the parent
// ahead of its interval only when the key's demand moved: when it outgrew
// the region's lease (and then at every check for an interval, while it
// still outruns the lease, to collect the increase as other regions
// confirm their decreases), or when it fell away (then once more, to
// confirm the lower lease it was answered with, and at every check for
// the rest of the interval while it is leased well above its demand, to
// collect a decrease the parent makes when another region asks). Steady
// demand, over the quota or under it, and small moves wait for the
// regular report.
func TestTierEarlyReports(t *testing.T) {
	const checks = 2 * earlyChecks // a check apart: two parent intervals
	for _, tc := range []struct {
		name          string
		before, after float64 // us's demand, per second
		// due is how many of the checks find an early report due.
		due int
	}{
		{"steady demand over the quota", 2000, 2000, 0},
		{"steady demand under the quota", 200, 200, 0},
		{"a small move", 2000, 1950, 0},
		{"a rise within the lease", 100, 400, 0},
		{"demand outgrows the lease", 100, 2000, earlyChecks}, // then followed for an interval
		// The decrease, then the report that the region holds the lower
		// lease the parent answered it with (the parent counts the
		// larger one until then), then one a check for the rest of the
		// interval: alone, us keeps half the quota as headroom, well
		// above its demand of nothing.
		{"demand falls away", 2000, 0, earlyChecks},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 900)
			for range 10 {
				w.step(map[string]float64{"us": tc.before})
			}
			w.now = w.now.Add(100 * time.Millisecond)
			w.nodeReport("us", tc.after)
			us, due := w.regions["us"], 0
			for i := range checks {
				w.now = w.now.Add(time.Second / earlyChecks)
				if i%earlyChecks == earlyChecks-1 {
					w.nodeReport("us", tc.after) // its next regular report
				}
				req := us.RegionEarlyReport(w.now, time.Second)
				if req == nil {
					continue
				}
				due++
				if len(req.GetDemand()) != 1 || req.GetDemand()[0].GetKey() != "acme" {
					t.Fatalf("early report of %v; want acme's demand", req.GetDemand())
				}
				if got := req.GetDemand()[0].GetAdmitted(); got != tc.after {
					t.Fatalf("early report of a demand of %.1f; want %.1f", got, tc.after)
				}
				resp, err := w.parent.Report(w.now, req)
				if err != nil {
					t.Fatal(err)
				}
				us.ApplyParent(w.now, resp)
				w.withinQuota("after an early report")
			}
			if due != tc.due {
				t.Fatalf("%d of %d checks found an early report due; want %d", due, checks, tc.due)
			}
		})
	}
}

// TestParentBoundsRegionGroups: a parent keeps what it hears of each
// shard group of a region by the group's name, which the region's
// credential chooses: a region naming ever new groups grows neither the
// region's record nor a key's beyond maxRegionGroups, and the group it
// names last is the one kept.
func TestParentBoundsRegionGroups(t *testing.T) {
	w := newWorld(t, 900)
	w.step(map[string]float64{"eu": 100})
	for i := range 3 * maxRegionGroups {
		w.now = w.now.Add(time.Millisecond)
		req := w.regions["eu"].RegionReport(w.now, time.Second)
		req.ReporterGroup = fmt.Sprintf("g%d", i)
		if _, err := w.parent.Report(w.now, req); err != nil {
			t.Fatal(err)
		}
	}
	last := fmt.Sprintf("g%d", 3*maxRegionGroups-1)
	e := w.parent
	e.mu.Lock()
	defer e.mu.Unlock()
	e.alloc.mu.Lock()
	groups := e.alloc.nodes[RegionNode("eu")].groupSeen
	if _, ok := groups[last]; len(groups) > maxRegionGroups || !ok {
		t.Errorf("the region's record holds %d groups (at most %d), the last named kept: %v", len(groups), maxRegionGroups, ok)
	}
	e.alloc.mu.Unlock()
	sh := e.alloc.shard(poolKey{"quota", "acme"})
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.pools[poolKey{"quota", "acme"}]
	if p == nil {
		t.Fatal("the parent has no pool for acme's key")
	}
	eu := 0
	for k := range p.regionSeen {
		if r, _ := regionOf(k); r == "eu" {
			eu++
		}
	}
	if _, ok := p.regionSeen[regionGroup("eu", last)]; eu > maxRegionGroups || !ok {
		t.Errorf("the key's record holds %d of eu's groups (at most %d), the last named kept: %v", eu, maxRegionGroups, ok)
	}
}

// TestFallenRegionsByGroup: on a parent, a key a region's group reported
// and no longer does is the region's static fraction only if that group
// went silent; another group of the region reporting says nothing of it.
func TestFallenRegionsByGroup(t *testing.T) {
	ttl := int64(5 * time.Second)
	cases := []struct {
		name       string
		groupsLast map[string]int64 // when each of eu's groups last reported
		want       float64
	}{
		{"the group that divides the key reports other keys: it forgot the key", map[string]int64{"g1": 9 * ttl / 5, "main": 9 * ttl / 5}, 0},
		{"the group went silent while the home group reports: eu is on its fraction", map[string]int64{"g1": ttl / 10, "main": 9 * ttl / 5}, 450},
		{"the whole region went silent", map[string]int64{"g1": ttl / 10, "main": ttl / 10}, 450},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := New(Config{Region: "global", Global: true, ReportInterval: time.Second, LeaseTTL: 5 * time.Second})
			a.nodes[RegionNode("eu")] = &nodeInfo{groupSeen: c.groupsLast}
			r := &rules.Rule{Name: "q", Limit: 900, Regions: map[string]float64{"us": 0.5, "eu": 0.5}}
			p := &pool{rule: r, limit: 900}
			p.sawRegion("eu", "g1", ttl/20) // g1 reported the key, then not again
			if got := a.fallenRegions(p, 2*ttl); got != c.want {
				t.Fatalf("fallen %v, want %v", got, c.want)
			}
		})
	}
}
