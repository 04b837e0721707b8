package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/coordinator/rlqs/rlqstest"
	"github.com/allot-io/allot/internal/pgserver/pgtest"
	"github.com/allot-io/allot/internal/shard"
	"github.com/allot-io/allot/internal/testwait"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// twoGroups starts a region as two one-member groups: the home group and
// g1, added to the map and owning nothing yet.
func twoGroups(t *testing.T) (home, g1 *Coordinator) {
	t.Helper()
	home = cluster(t, 1, nil)[0]
	g1 = cluster(t, 1, func(cfg *Config) { cfg.Group, cfg.ShardHome = "g1", []string{home.GRPCAddr()} })[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := allotpb.NewShardServiceClient(dial(t, home.GRPCAddr())).AddGroup(ctx, &allotpb.AddGroupRequest{Id: "g1", Coordinators: []string{g1.GRPCAddr()}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "g1 to start owning no slot", func() bool {
		n := -1
		g1.fsm.Read(func(st *state.State) {
			if st.Group() == "g1" {
				n = st.OwnedSlots()
			}
		})
		return n == 0
	})
	return home, g1
}

func TestShardGroupsMirrorRulesAndRefuseWrites(t *testing.T) {
	home, g1 := twoGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := allotpb.NewRulesServiceClient(dial(t, home.GRPCAddr())).PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{quotaRule}}); err != nil {
		t.Fatal(err)
	}
	want := home.currentRules().Version()
	testwait.For(t, 10*time.Second, "g1 to mirror the home group's rules with their version", func() bool {
		return g1.currentRules().Version() == want && g1.currentRules().Len() == 1
	})
	_, err := allotpb.NewRulesServiceClient(dial(t, g1.GRPCAddr())).PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{quotaRule}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a rule write to a group that is not home: %v, want FailedPrecondition", err)
	}
	_, err = allotpb.NewShardServiceClient(dial(t, g1.GRPCAddr())).GetShardMap(ctx, &allotpb.GetShardMapRequest{})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("the map asked of a group that is not home: %v, want FailedPrecondition", err)
	}
}

// TestMoveSlotsRoutesUsage: a tenant's slot moved from the home group to
// g1; the home group refuses the tenant's usage after the move, naming
// the slot, and g1 takes it; the two ledgers sum to what was sent.
func TestMoveSlotsRoutesUsage(t *testing.T) {
	home, g1 := twoGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	shards := allotpb.NewShardServiceClient(dial(t, home.GRPCAddr()))
	a := newAgentSim(t, "gw-1", []string{home.GRPCAddr()})
	if _, err := a.report(ctx, "acme", 7, nil); err != nil || a.ackedTotal() != 7 {
		t.Fatalf("first report: %v (acked %d)", err, a.ackedTotal())
	}
	sl := uint32(shard.Of("acme"))
	if _, err := shards.MoveSlots(ctx, &allotpb.MoveSlotsRequest{First: sl, Last: sl, To: "nope"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a move to no group: %v, want FailedPrecondition", err)
	}
	mv, err := shards.MoveSlots(ctx, &allotpb.MoveSlotsRequest{First: sl, Last: sl, To: "g1"})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 15*time.Second, "the move to be done", func() bool {
		m, err := shards.GetShardMap(ctx, &allotpb.GetShardMapRequest{})
		return err == nil && len(m.GetMoves()) == 1 && m.GetMoves()[0].GetPhase() == allotpb.SlotMove_DONE
	})
	m, err := shards.GetShardMap(ctx, &allotpb.GetShardMapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := shard.FromProto(m)
	if err != nil {
		t.Fatal(err)
	}
	if sm.Route("acme") != "g1" || sm.Count()["g1"] != 1 {
		t.Fatalf("after move %d: acme routed to %s, g1 owns %d slots", mv.GetMove().GetId(), sm.Route("acme"), sm.Count()["g1"])
	}
	// The home group refuses acme's next batch, naming the slot.
	_, err = a.report(ctx, "acme", 5, nil)
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition {
		t.Fatalf("usage of a moved slot at its old group: %v, want FailedPrecondition", err)
	}
	var moved *allotpb.SlotsMoved
	for _, d := range st.Details() {
		if x, ok := d.(*allotpb.SlotsMoved); ok {
			moved = x
		}
	}
	if moved == nil || len(moved.GetSlots()) != 1 || moved.GetSlots()[0] != sl || moved.GetMapVersion() != m.GetVersion() {
		t.Fatalf("refusal detail %v, want slot %d at map version %d", moved, sl, m.GetVersion())
	}
	// The same agent at g1: a new sequence of its own there.
	b := newAgentSim(t, "gw-1", []string{g1.GRPCAddr()})
	b.incarnation = a.incarnation
	if _, err := b.report(ctx, "acme", 5, nil); err != nil || b.ackedTotal() != 5 {
		t.Fatalf("report to the new owner: %v (acked %d)", err, b.ackedTotal())
	}
	h, _ := ledgerTotal(home.fsm, "acme")
	g, _ := ledgerTotal(g1.fsm, "acme")
	if h != 7 || g != 5 {
		t.Fatalf("ledgers: home %d, g1 %d; want 7 and 5", h, g)
	}
	// Demand for the moved tenant gets no lease at home any more.
	resp, err := newAgentSim(t, "gw-2", []string{home.GRPCAddr()}).report(ctx, "", 0, []*allotpb.KeyDemand{{Rule: "plan-quota", Key: "acme", Tenant: "acme", Admitted: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetLeases()) != 0 || resp.GetShardMapVersion() != m.GetVersion() {
		t.Fatalf("home answered demand for a moved tenant with %d leases, map version %d", len(resp.GetLeases()), resp.GetShardMapVersion())
	}
}

// TestRLQSInSplitRegion: an Envoy's RLQS stream on the home group for a
// tenant whose slot moved to g1: the stream's usage lands in g1's ledger,
// and the home group's plus g1's hold every request the member received
// as allowed, once.
func TestRLQSInSplitRegion(t *testing.T) {
	home, g1 := twoGroups(t)
	putRules(t, home, rlqsRule)
	testwait.For(t, 10*time.Second, "g1 to mirror the rules", func() bool { return g1.currentRules().Len() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shards := allotpb.NewShardServiceClient(dial(t, home.GRPCAddr()))
	envoy := rlqstest.New([]string{home.GRPCAddr()}, map[string]string{"rule": "api", "tenant": "acme"}, 100, plain)
	run, stopEnvoy := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = envoy.Run(run) }()
	testwait.For(t, 15*time.Second, "the Envoy's first usage in the home group's ledger", func() bool {
		got, _ := ledgerTotal(home.fsm, "acme")
		return got > 0
	})
	sl := uint32(shard.Of("acme"))
	if _, err := shards.MoveSlots(ctx, &allotpb.MoveSlotsRequest{First: sl, Last: sl, To: "g1"}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 15*time.Second, "the stream's usage to reach g1", func() bool {
		got, _ := ledgerTotal(g1.fsm, "acme")
		return got > 0
	})
	stopEnvoy()
	<-done
	received := counterValue(t, home, "allot_coordinator_rlqs_requests_total", "result", "allowed")
	testwait.For(t, 15*time.Second, "the two ledgers to hold every request received, once", func() bool {
		h, _ := ledgerTotal(home.fsm, "acme")
		g, _ := ledgerTotal(g1.fsm, "acme")
		return float64(h+g) == received
	})
}

// TestShardGroupsExportToOneSink: both groups of a split region export to
// one PostgreSQL, each under its own cluster ID and position; a tenant
// whose slot moved mid-run has lines from both, and the billing query
// sums them to what the agent had acknowledged.
func TestShardGroupsExportToOneSink(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pgtest.CreateDatabase(t, pg)
	home := cluster(t, 1, sinkConfig(dsn))[0]
	g1 := cluster(t, 1, func(cfg *Config) {
		sinkConfig(dsn)(cfg)
		cfg.Group, cfg.ShardHome = "g1", []string{home.GRPCAddr()}
	})[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shards := allotpb.NewShardServiceClient(dial(t, home.GRPCAddr()))
	if _, err := shards.AddGroup(ctx, &allotpb.AddGroupRequest{Id: "g1", Coordinators: []string{g1.GRPCAddr()}}); err != nil {
		t.Fatal(err)
	}
	a := newAgentSim(t, "gw-1", []string{home.GRPCAddr()})
	for range 5 {
		if _, err := a.report(ctx, "acme", 3, nil); err != nil {
			t.Fatal(err)
		}
	}
	sl := uint32(shard.Of("acme"))
	if _, err := shards.MoveSlots(ctx, &allotpb.MoveSlotsRequest{First: sl, Last: sl, To: "g1"}); err != nil {
		t.Fatal(err)
	}
	b := newAgentSim(t, "gw-1", []string{g1.GRPCAddr()})
	b.incarnation = a.incarnation
	testwait.For(t, 20*time.Second, "usage to be taken by g1 once the move is done", func() bool {
		_, err := b.report(ctx, "acme", 4, nil)
		return err == nil && b.ackedTotal() > 0
	})
	for range 4 {
		if _, err := b.report(ctx, "acme", 4, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := a.ackedTotal() + b.ackedTotal()
	clusterOf := func(c *Coordinator) (id string) {
		c.fsm.Read(func(s *state.State) { id = s.ClusterID() })
		return id
	}
	testwait.For(t, 30*time.Second, "both groups to export every line", func() bool {
		h, _ := sinkTotal(t, dsn, clusterOf(home), "acme")
		g, _ := sinkTotal(t, dsn, clusterOf(g1), "acme")
		return h > 0 && g > 0 && h+g == want
	})
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var admitted int64
	var rule string
	var denied int64
	if err := conn.QueryRow(ctx, ledgersink.QueryTenantMonth, "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Hour)).Scan(&rule, &admitted, &denied); err != nil {
		t.Fatal(err)
	}
	if uint64(admitted) != want {
		t.Fatalf("the billing query sums %d for acme over both groups, the groups acknowledged %d", admitted, want)
	}
}

// TestTierWithShardGroups: a region split into two groups leases from the
// parent from the group owning the tenant's slot: eu's g1 divides acme,
// and the quota follows acme's demand to it.
func TestTierWithShardGroups(t *testing.T) {
	rule := &allotpb.Rule{Name: "plan-quota", Scope: "tenant", Algorithm: "token_bucket", Limit: 900, Period: durationpb.New(time.Second),
		Burst: 900, Intent: "quota", Regions: map[string]float64{"us": 0.5, "eu": 0.5}}
	parent := cluster(t, 1, func(c *Config) { c.Global, c.Region = true, "global" })[0]
	putRules(t, parent, rule)
	tier := func(region string) func(*Config) {
		return func(c *Config) {
			c.Region, c.Parent, c.ParentInterval = region, []string{parent.GRPCAddr()}, 200*time.Millisecond
		}
	}
	us := cluster(t, 1, tier("us"))[0]
	putRules(t, us, rule)
	home := cluster(t, 1, tier("eu"))[0]
	putRules(t, home, rule)
	g1 := cluster(t, 1, func(c *Config) { tier("eu")(c); c.Group, c.ShardHome = "g1", []string{home.GRPCAddr()} })[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shards := allotpb.NewShardServiceClient(dial(t, home.GRPCAddr()))
	if _, err := shards.AddGroup(ctx, &allotpb.AddGroupRequest{Id: "g1", Coordinators: []string{g1.GRPCAddr()}}); err != nil {
		t.Fatal(err)
	}
	sl := uint32(shard.Of("acme"))
	if _, err := shards.MoveSlots(ctx, &allotpb.MoveSlotsRequest{First: sl, Last: sl, To: "g1"}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 15*time.Second, "g1 to own acme's slot and mirror the rule", func() bool {
		owns := false
		g1.fsm.Read(func(s *state.State) { owns = s.Owns(shard.Slot(sl)) })
		return owns && g1.currentRules().Len() == 1
	})
	node := newAgentSim(t, "gw-eu", []string{g1.GRPCAddr()})
	node.region = "eu"
	held := 0.0
	testwait.For(t, 20*time.Second, "eu's g1, where acme's demand is, to be leased nearly the whole quota", func() bool {
		resp, err := node.report(ctx, "acme", 0, []*allotpb.KeyDemand{demand("plan-quota", "acme", 400, 0, held)})
		if err != nil {
			return false
		}
		for _, l := range resp.GetLeases() {
			held = l.GetLimit()
		}
		return held >= 0.9*900
	})
	if st := g1.Status().GetTier(); st.GetRole() != "region" || st.GetLeasedKeys() != 1 {
		t.Errorf("g1's tier status: %v", st)
	}
}

// TestRegionUsageAcrossGroups: the home group of a split region answers a
// usage query for every group, paged, a line two groups both counted
// summed; another group refuses a query that is not for its part alone.
func TestRegionUsageAcrossGroups(t *testing.T) {
	home, g1 := twoGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := newAgentSim(t, "gw-1", []string{home.GRPCAddr()})
	for _, tn := range []string{"acme", "beta", "gamma", "acme"} {
		if _, err := a.report(ctx, tn, 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	shards := allotpb.NewShardServiceClient(dial(t, home.GRPCAddr()))
	sl := uint32(shard.Of("acme"))
	if _, err := shards.MoveSlots(ctx, &allotpb.MoveSlotsRequest{First: sl, Last: sl, To: "g1"}); err != nil {
		t.Fatal(err)
	}
	b := newAgentSim(t, "gw-1", []string{g1.GRPCAddr()})
	b.incarnation = a.incarnation
	testwait.For(t, 15*time.Second, "g1 to take acme's usage", func() bool {
		_, err := b.report(ctx, "acme", 5, nil)
		return err == nil && b.ackedTotal() == 5
	})
	got := map[string]uint64{}
	lines := 0
	q := &allotpb.UsageQuery{PageSize: 1}
	for page := 0; page < 10; page++ {
		resp, err := home.regionUsage(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetRecords() {
			got[r.GetTenant()] += r.GetAdmitted()
			lines++
		}
		if q.PageToken = resp.GetNextPageToken(); q.PageToken == "" {
			break
		}
	}
	if got["acme"] != 9 || got["beta"] != 2 || got["gamma"] != 2 || lines != 3 {
		t.Fatalf("the region's usage, paged one line at a time: %v in %d lines; want acme 9 (4 at home, 5 in g1, one line), beta 2, gamma 2", got, lines)
	}
	if _, err := g1.regionUsage(ctx, &allotpb.UsageQuery{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a region query of a group that is not home: %v, want FailedPrecondition", err)
	}
	if resp, err := g1.regionUsage(ctx, &allotpb.UsageQuery{GroupOnly: true}); err != nil || len(resp.GetRecords()) != 1 {
		t.Fatalf("g1's own part: %v, %v", resp, err)
	}
}
