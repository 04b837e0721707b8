package agent

import (
	"context"
	"fmt"
	"github.com/allot-io/allot/internal/testwait"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const testInterval = 100 * time.Millisecond

// coordinators starts n coordinators on loopback, in temporary dirs, and
// waits until every one has joined.
func coordinators(t *testing.T, n int) []*coordinator.Coordinator {
	t.Helper()
	cs := coordinatorsWith(t, n, nil)
	testwait.For(t, 30*time.Second, "every coordinator to join as a voter and know the leader", func() bool {
		for _, c := range cs {
			st := c.Status()
			voters := 0
			for _, m := range st.GetMembers() {
				if m.GetVoter() {
					voters++
				}
			}
			if voters != n || st.GetLeaderGrpcAddress() == "" {
				return false
			}
		}
		return true
	})
	return cs
}

func stopCoordinator(c *coordinator.Coordinator) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Close(ctx)
}

func addrs(cs []*coordinator.Coordinator) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.GRPCAddr())
	}
	return out
}

func putRules(t *testing.T, addr string, rs ...rules.Rule) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	req := &allotpb.PutRulesRequest{ReplaceAll: true}
	for i := range rs {
		req.Rules = append(req.Rules, rulespb.ToProto(&rs[i]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := allotpb.NewRulesServiceClient(cc).PutRules(ctx, req); err != nil {
		t.Fatal(err)
	}
}

func newAgent(t *testing.T, node string, coords []string, mod func(*Config)) *Agent {
	t.Helper()
	cfg := Config{Coordinators: coords, NodeID: node, Region: "eu-west", ReportInterval: testInterval}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.Close(ctx)
	})
	select {
	case <-a.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("agent got no rules")
	}
	return a
}

// drive sends requests for req to a at about rate per second until stop
// closes, counting admissions.
func drive(a *Agent, req Request, rate float64, stop <-chan struct{}, admitted, denied *atomic.Int64) {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	start := time.Now()
	sent := 0.0
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			for due := time.Since(start).Seconds() * rate; sent < due; sent++ {
				if a.Check(req).Allowed {
					admitted.Add(1)
				} else {
					denied.Add(1)
				}
			}
		}
	}
}

// hotLease is the lease a key holds on an agent, or 0.
func hotLease(a *Agent, ruleName string) float64 {
	c := a.rules.Load()
	if c == nil {
		return 0
	}
	for _, rs := range c.rules {
		if rs.rule.Name != ruleName {
			continue
		}
		for _, hk := range *rs.hot.Load() {
			if l := hk.leaseLimit(); l > 0 {
				return l
			}
		}
	}
	return 0
}

// TestStickyTenantGetsTheWholeLimit: three gateways, a tenant whose traffic
// all lands on one of them at twice the limit. Even splitting would admit a
// third of the limit; with leases the busy node's share grows until it
// holds nearly the whole limit, while the fleet never holds more than the
// limit plus tolerance.
func TestStickyTenantGetsTheWholeLimit(t *testing.T) {
	cs := coordinators(t, 1)
	quota := rule("plan-quota", rules.Tenant, algo.TokenBucket, 600, time.Second, lease.Quota)
	putRules(t, cs[0].GRPCAddr(), quota)
	var agents []*Agent
	for i := 0; i < 3; i++ {
		agents = append(agents, newAgent(t, fmt.Sprintf("gw-%d", i), addrs(cs), nil))
	}
	// The other two nodes see a trickle of the tenant.
	stop := make(chan struct{})
	var admitted, denied, other atomic.Int64
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); drive(agents[0], Request{Tenant: "acme"}, 1200, stop, &admitted, &denied) }()
	go func() { defer wg.Done(); drive(agents[1], Request{Tenant: "acme"}, 5, stop, &other, &other) }()
	go func() { defer wg.Done(); drive(agents[2], Request{Tenant: "acme"}, 5, stop, &other, &other) }()
	defer func() { close(stop); wg.Wait() }()
	testwait.For(t, 20*time.Second, "the busy node to hold most of the limit", func() bool {
		return hotLease(agents[0], "plan-quota") > 0.8*600
	})
	total := 0.0
	for _, a := range agents {
		total += hotLease(a, "plan-quota")
	}
	if total > 600*(1+lease.Quota.DefaultTolerance())+1 {
		t.Errorf("leases add up to %.1f, over the limit plus tolerance", total)
	}
}

// TestFailModes stops the only coordinator: after a lease period each rule
// goes onto its fail mode — capacity to limit ÷ nodes, quota keeping its
// last lease, abuse refusing everything — and comes back when the
// coordinator does.
func TestFailModes(t *testing.T) {
	dir := t.TempDir()
	cfg := coordinator.Config{
		NodeID: "c1", DataDir: dir, Region: "eu-west", RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		ReportInterval: testInterval, LeaseTTL: 5 * testInterval, ApplyWindow: 5 * time.Millisecond,
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond, Bootstrap: true,
		Logger: hclog.NewNullLogger(),
	}
	c, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	capRule := rule("capacity", rules.Tenant, algo.TokenBucket, 1000, time.Second, lease.Capacity)
	quota := rule("quota", rules.User, algo.TokenBucket, 1000, time.Second, lease.Quota)
	abuse := rule("abuse", rules.IP, algo.TokenBucket, 1000, time.Second, lease.Abuse)
	putRules(t, c.GRPCAddr(), capRule, quota, abuse)
	coordAddr, raftAddr := c.GRPCAddr(), c.RaftAddr()
	a := newAgent(t, "gw-1", []string{coordAddr}, nil)
	b := newAgent(t, "gw-2", []string{coordAddr}, nil) // a second node: shares are halves
	testwait.For(t, 10*time.Second, "both nodes to be counted", func() bool { return a.nodes.Load() == 2 })

	stop := make(chan struct{})
	var n1, n2 atomic.Int64
	go drive(a, Request{Tenant: "acme", User: "u1", IP: "203.0.113.1"}, 1500, stop, &n1, &n2)
	testwait.For(t, 20*time.Second, "leases for the busy keys", func() bool {
		return hotLease(a, "capacity") > 0 && hotLease(a, "quota") > 0 && hotLease(a, "abuse") > 0
	})
	close(stop)
	quotaLease := hotLease(a, "quota")

	stopCoordinator(c)
	byName := func(name string) *ruleState {
		for _, rs := range a.rules.Load().rules {
			if rs.rule.Name == name {
				return rs
			}
		}
		return nil
	}
	testwait.For(t, 10*time.Second, "every rule to go onto its fail mode", func() bool {
		return byName("capacity").fallback.Load() && byName("quota").fallback.Load() && byName("abuse").fallback.Load()
	})
	if got := hotLease(a, "capacity"); got != 0 {
		t.Errorf("capacity: still on a lease of %.1f; want the fallback share", got)
	}
	capShare := byName("capacity").def.share
	if math.Abs(capShare-500) > 1 {
		t.Errorf("capacity fallback share %.1f, want 1000 ÷ 2 nodes", capShare)
	}
	if got := hotLease(a, "quota"); got != quotaLease {
		t.Errorf("quota: lease %.1f on fallback, want the last lease %.1f kept", got, quotaLease)
	}
	d := a.Check(Request{Tenant: "other", User: "u9", IP: "198.51.100.7"})
	if d.Allowed || d.Rule != "abuse" || !d.Fallback {
		t.Errorf("abuse on fail mode: %+v, want refused (fails closed)", d)
	}

	// The coordinator comes back on the same addresses and data.
	cfg.Bootstrap = false
	cfg.GRPCAddr, cfg.RaftAddr = coordAddr, raftAddr
	c2, err := coordinator.New(cfg)
	if err != nil {
		t.Fatalf("restarting the coordinator: %v", err)
	}
	t.Cleanup(func() { stopCoordinator(c2) })
	testwait.For(t, 30*time.Second, "rules to come back onto leases", func() bool {
		return !byName("capacity").fallback.Load() && !byName("abuse").fallback.Load()
	})
	if d := a.Check(Request{Tenant: "other", User: "u9", IP: "198.51.100.8"}); !d.Allowed {
		t.Errorf("after recovery: %+v", d)
	}
	// Close the agents while the coordinator is up, so they flush.
	for _, ag := range []*Agent{a, b} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := ag.Close(ctx); err != nil {
			t.Error(err)
		}
		cancel()
	}
}

// skewedClock is the system clock off by a fixed amount.
type skewedClock struct{ skew time.Duration }

func (c skewedClock) Now() time.Time { return time.Now().Add(c.skew) }

// TestClockSkew: gateways whose clocks are 5 s ahead and 5 s behind learn
// the coordinators' time, so their windows match: each admits exactly the
// window's limit in the coordinator's current window.
func TestClockSkew(t *testing.T) {
	cs := coordinators(t, 1)
	w := rule("per-window", rules.User, algo.FixedWindow, 5, 10*time.Second, lease.Capacity)
	w.Local = true
	putRules(t, cs[0].GRPCAddr(), w)
	for _, skew := range []time.Duration{5 * time.Second, -5 * time.Second} {
		a := newAgent(t, "gw-"+skew.String(), addrs(cs), func(c *Config) { c.Clock = skewedClock{skew} })
		testwait.For(t, 10*time.Second, "the clock offset to be learned", func() bool {
			return math.Abs(float64(time.Duration(a.clock.now())-time.Duration(time.Now().UnixNano()))) < float64(200*time.Millisecond)
		})
		// Wait until the real window has at least 2 s left.
		for time.Now().UnixNano()%int64(10*time.Second) > int64(8*time.Second) {
			time.Sleep(50 * time.Millisecond)
		}
		wantReset := time.Duration(int64(10*time.Second) - time.Now().UnixNano()%int64(10*time.Second))
		admitted := 0
		var last Decision
		for i := 0; i < 20; i++ {
			if d := a.Check(Request{Tenant: "t", User: "u-" + skew.String()}); d.Allowed {
				admitted++
			} else {
				last = d
			}
		}
		if admitted != 5 {
			t.Errorf("skew %v: admitted %d in one window, want 5", skew, admitted)
		}
		if diff := last.ResetAfter - wantReset; diff > 500*time.Millisecond || diff < -500*time.Millisecond {
			t.Errorf("skew %v: the window resets in %v, the coordinators' in %v", skew, last.ResetAfter, wantReset)
		}
	}
}

// TestRuleChangeKeepsCounts: a new rule set from the coordinator replaces
// the old one without dropping a request or losing the state of rules that
// did not change, and all usage reaches the ledger.
func TestRuleChangeKeepsCounts(t *testing.T) {
	cs := coordinators(t, 1)
	keep := rule("keep", rules.Tenant, algo.FixedWindow, 100, time.Hour, lease.Quota)
	keep.Local = true
	putRules(t, cs[0].GRPCAddr(), keep)
	a := newAgent(t, "gw-1", addrs(cs), nil)
	for i := 0; i < 30; i++ {
		a.Check(Request{Tenant: "acme"})
	}
	version := a.Rules().Version()
	added := rule("added", rules.User, algo.GCRA, 1000, time.Second, lease.Capacity)
	putRules(t, cs[0].GRPCAddr(), keep, added)
	testwait.For(t, 10*time.Second, "the new rules", func() bool { return a.Rules().Version() > version })
	d := a.Check(Request{Tenant: "acme", User: "u"})
	if !d.Allowed {
		t.Fatalf("%+v", d)
	}
	// 31 spent of 100 in the window: the change kept the state.
	var keepRemaining int64
	for _, rs := range a.rules.Load().rules {
		if rs.rule.Name == "keep" {
			peek := rs.def.keyed.AllowAt("acme", time.Unix(0, a.clock.now()), 0)
			keepRemaining = peek.Remaining
		}
	}
	if keepRemaining != 69 {
		t.Errorf("rule 'keep' has %d left after the change, want 69", keepRemaining)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cc, _ := grpc.NewClient(cs[0].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer cc.Close()
	resp, err := allotpb.NewUsageServiceClient(cc).QueryUsage(ctx, &allotpb.UsageQuery{Tenant: "acme", Rule: "keep", From: timestamppb.New(time.Now().Add(-2 * time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, r := range resp.GetRecords() {
		total += r.GetAdmitted()
	}
	if total != 31 {
		t.Errorf("ledger holds %d admitted under 'keep', the agent admitted 31", total)
	}
}

// TestAgentFollowsLeader: an agent given only a follower's address finds
// the leader, and keeps reporting through a leader failover.
func TestAgentFollowsLeader(t *testing.T) {
	cs := coordinators(t, 3)
	putRules(t, cs[0].GRPCAddr(), rule("r", rules.Tenant, algo.GCRA, 1000, time.Second, lease.Capacity))
	var follower *coordinator.Coordinator
	for _, c := range cs {
		if !c.IsLeader() {
			follower = c
		}
	}
	a := newAgent(t, "gw-1", []string{follower.GRPCAddr()}, nil)
	before := reportsOK(a)
	testwait.For(t, 10*time.Second, "reports to succeed through the follower's pointer", func() bool { return reportsOK(a) > before+3 })
	for _, c := range cs {
		if c.IsLeader() {
			stopCoordinator(c)
		}
	}
	mid := reportsOK(a)
	testwait.For(t, 30*time.Second, "reports to succeed after the failover", func() bool { return reportsOK(a) > mid+3 })
}

func reportsOK(a *Agent) int64 { return a.rep.answeredCount.Load() }

// TestGlobalRuleSharesByWeight: two tenants on plans of the same rank
// saturate a global capacity rule through one gateway; the coordinator's
// leases give them its capacity by plan weight (3:1), and batch traffic is
// shed first. (Plans of different ranks shed strictly: the lower rank gets
// nothing while the higher wants more than the capacity; see package
// lease's priority scenarios.)
func TestGlobalRuleSharesByWeight(t *testing.T) {
	cs := coordinators(t, 1)
	g := rule("api-capacity", rules.Global, algo.TokenBucket, 400, time.Second, lease.Capacity)
	g.Plans = map[string]rules.Plan{"free": {Weight: 1}, "pro": {Weight: 3}}
	putRules(t, cs[0].GRPCAddr(), g)
	a := newAgent(t, "gw-1", addrs(cs), nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var proOK, freeOK, batchOK, sink atomic.Int64
	wg.Add(3)
	go func() { defer wg.Done(); drive(a, Request{Tenant: "big", Plan: "pro"}, 600, stop, &proOK, &sink) }()
	go func() { defer wg.Done(); drive(a, Request{Tenant: "small", Plan: "free"}, 600, stop, &freeOK, &sink) }()
	go func() {
		defer wg.Done()
		drive(a, Request{Tenant: "big", Plan: "pro", Priority: Batch}, 200, stop, &batchOK, &sink)
	}()
	defer func() { close(stop); wg.Wait() }()
	classLease := func(tenant string, p Priority, plan string) float64 {
		rs := a.rules.Load().rules[0]
		ck := classKey{a.hasher.String(tenant), classPriority(rs, &Request{Priority: p, Plan: plan})}
		if hk := (*rs.fair.classes.Load())[ck]; hk != nil {
			return hk.leaseLimit()
		}
		return 0
	}
	// The first division is made before the classes' demand is known and
	// may hand spare capacity to every class; once demand is known the
	// interactive classes split the capacity 3:1 and batch is shed.
	testwait.For(t, 20*time.Second, "class leases near a 3:1 split, batch shed", func() bool {
		pro, free := classLease("big", Interactive, "pro"), classLease("small", Interactive, "free")
		return pro > 0 && free > 0 && math.Abs(pro/free-3) < 0.5 && classLease("big", Batch, "pro") <= 0.05*400
	})
	for range 5 { // and it stays shed, report after report
		if b := classLease("big", Batch, "pro"); b > 0.05*400 {
			t.Fatalf("batch class holds %.1f while interactive demand exceeds the capacity; want it shed", b)
		}
		n := reportsOK(a)
		testwait.For(t, 10*time.Second, "the next answered report", func() bool { return reportsOK(a) > n })
	}
}

// TestDescriptorLimitAcrossTheFleet: two gateways sharing a descriptor
// whose own limit is 20 a minute admit at most 20 of it together in a
// minute (the rule's intent, abuse, tolerates nothing over), not the
// rule's 1000/s, nor 20 each; and the busy one admits more than its even
// half: the coordinators divide the key's own limit by demand.
func TestDescriptorLimitAcrossTheFleet(t *testing.T) {
	cs := coordinators(t, 1)
	per := rule("per-user", rules.Descriptor, algo.FixedWindow, 1000, time.Second, lease.Abuse)
	per.Match = rules.Match{Domain: "api", Descriptors: []rules.DescriptorEntry{{Key: "user"}}}
	putRules(t, cs[0].GRPCAddr(), per)
	agents := []*Agent{newAgent(t, "gw-1", addrs(cs), nil), newAgent(t, "gw-2", addrs(cs), nil)}
	testwait.For(t, 10*time.Second, "both gateways to count each other", func() bool {
		return agents[0].nodes.Load() == 2 && agents[1].nodes.Load() == 2
	})
	descs := []Descriptor{{Entries: []Entry{{"user", "ann"}}, Limit: &Limit{Requests: 20, Per: time.Minute}}}
	var mu sync.Mutex
	byWindow := map[int64]int{} // admitted, by the minute they fell in
	var busy atomic.Int64       // admitted by gw-1
	var wg sync.WaitGroup
	deadline := time.Now().Add(4 * time.Second)
	for i, a := range agents {
		pause := 10 * time.Millisecond // 100/s on gw-1, 2/s on gw-2
		if i == 1 {
			pause = 500 * time.Millisecond
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				now := time.Now()
				if d := a.CheckDescriptors("api", descs, 1, nil)[0]; d.Allowed {
					if d.Limit != 20 || d.Period != time.Minute {
						t.Errorf("decided by %d per %v", d.Limit, d.Period)
					}
					mu.Lock()
					byWindow[now.Truncate(time.Minute).Unix()]++
					mu.Unlock()
					if i == 0 {
						busy.Add(1)
					}
				}
				time.Sleep(pause)
			}
		}()
	}
	wg.Wait()
	total := 0
	for w, n := range byWindow {
		total += n
		if n > 20 {
			t.Errorf("the minute from %v admitted %d; the descriptor's limit is 20", time.Unix(w, 0), n)
		}
	}
	t.Logf("admitted %d in all, %d on the busy gateway, by minute %v", total, busy.Load(), byWindow)
	if total < 15 || busy.Load() <= 10 {
		t.Errorf("admitted %d in all, %d on the busy gateway: the fleet should spend (nearly) its 20, the busy gateway more than half", total, busy.Load())
	}
}
