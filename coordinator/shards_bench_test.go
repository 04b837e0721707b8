package coordinator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/shard"
	"github.com/allot-io/allot/internal/testwait"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// BenchmarkShardIntake measures report intake as a region grows from one
// shard group to several, all on this machine: G one-member groups in
// this process (the home group "main" and g1..), the slots split evenly
// between them by moves, and the same offered load for every G — agents
// each reporting the same K keys of the same 64 tenants, chosen so that
// every group owns its share. As an agent's router does, each agent
// sends, every round, one report to each group at once with that
// group's keys and usage, the usage numbered in a sequence per group.
// One op is one agent's round: K key entries, in G reports. Two loads,
// BenchmarkLeaderLoad's reference (16 agents × 1,000 keys) and its
// overloaded case (32 × 4,000). The agents report for one lease period
// before the timed runs, so that no group is still learning.
//
// Per group and in total it reports reports/s, key entries/s and the
// p50/p99 round trip of a report; round-p99-ms is an agent's whole round
// (the slowest of its G reports); cpu-cores is the process's CPU time over
// the wall time (well under 2 means something else had the cores: run it
// again); x-groups1 is the total key entries/s over groups=1's in the
// same run. The agents and every group share the same two cores, so the
// figures show how far one machine goes, not what G machines would.
//
//	go test -run '^$' -bench ShardIntake/agents=16 -benchtime 4000x ./coordinator
//	go test -run '^$' -bench ShardIntake/agents=32 -benchtime 2000x ./coordinator
func BenchmarkShardIntake(b *testing.B) {
	for _, load := range []struct{ agents, keys int }{{16, 1000}, {32, 4000}} {
		b.Run(fmt.Sprintf("agents=%d/keys=%d", load.agents, load.keys), func(b *testing.B) {
			base := 0.0
			for _, groups := range []int{1, 2, 4} {
				var fx *shardBench
				b.Run(fmt.Sprintf("groups=%d", groups), func(sb *testing.B) {
					if fx == nil {
						// Set up once, in the parent's directory: the
						// testing package calls this again with a larger
						// b.N.
						fx = newShardBench(sb, b.TempDir(), groups, load.agents, load.keys)
					}
					total := fx.run(sb)
					if groups == 1 {
						base = total
					}
					if base > 0 {
						sb.ReportMetric(total/base, "x-groups1")
					}
				})
				if fx != nil {
					fx.close()
				}
			}
		})
	}
}

// shardBench is a region of G groups and its agents' reports.
type shardBench struct {
	groups []*Coordinator
	ids    []string
	conns  []*grpc.ClientConn
	keys   int
	agents []*benchAgent
}

// benchAgent is one synthetic agent: a report per group, each with its
// own usage sequence and the leases it holds.
type benchAgent struct {
	lanes []*benchLane
}

type benchLane struct {
	client allotpb.AgentServiceClient
	req    *allotpb.ReportRequest
	index  map[string]*allotpb.KeyDemand
	seq    uint64
	lat    []time.Duration
}

func shardBenchConfig(dir, id string) Config {
	return Config{
		NodeID: id, DataDir: dir, Bootstrap: true,
		RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		ReportInterval: time.Second, ApplyWindow: 10 * time.Millisecond,
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		MaxReportKeys: 1 << 20, MaxReportBytes: 64 << 20,
	}
}

func newShardBench(b *testing.B, dir string, groups, agents, keys int) *shardBench {
	fx := &shardBench{keys: keys}
	ok := false
	defer func() {
		if !ok {
			fx.close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for g := 0; g < groups; g++ {
		id := shard.DefaultGroup
		cfg := shardBenchConfig(fmt.Sprintf("%s/%d", dir, g), fmt.Sprintf("bench-%d", g))
		if g > 0 {
			id = fmt.Sprintf("g%d", g)
			cfg.Group, cfg.ShardHome = id, []string{fx.groups[0].GRPCAddr()}
		}
		c, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		fx.groups, fx.ids = append(fx.groups, c), append(fx.ids, id)
		if err := c.WaitLeader(ctx); err != nil {
			b.Fatal(err)
		}
		cc, err := grpc.NewClient(c.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		fx.conns = append(fx.conns, cc)
	}
	home := fx.groups[0]
	if _, err := home.applyRulesCommand(context.Background(), &fsmpb.RulesCommand{Put: []*allotpb.Rule{
		{Name: "api", Scope: "user", Algorithm: "gcra", Limit: 100, Period: durationpb.New(time.Second), Burst: 20, Intent: "capacity"},
	}}); err != nil {
		b.Fatal(err)
	}
	m := fx.split(ctx, b)
	fx.makeAgents(b, m, agents)
	fx.warmUp(b)
	ok = true
	return fx
}

// warmUp has the agents report for one lease period and a report
// interval: every leader, and every move's target for the slots it took,
// divides in learning mode for one lease period, and the agents then
// hold their leases, so the timed runs see the steady state.
func (fx *shardBench) warmUp(b *testing.B) {
	cfg := fx.groups[0].cfg
	until := time.Now().Add(cfg.LeaseTTL + cfg.ReportInterval)
	var wg sync.WaitGroup
	for _, ag := range fx.agents {
		wg.Go(func() {
			for time.Now().Before(until) {
				if _, err := ag.round(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// split adds the groups to the home group's map and moves each its even
// share of the slots, one move at a time, and returns the map.
func (fx *shardBench) split(ctx context.Context, b *testing.B) *shard.Map {
	home := fx.groups[0]
	sc := allotpb.NewShardServiceClient(fx.conns[0])
	want := home.currentRules().Version()
	for g := 1; g < len(fx.groups); g++ {
		c, id := fx.groups[g], fx.ids[g]
		if _, err := sc.AddGroup(ctx, &allotpb.AddGroupRequest{Id: id, Coordinators: []string{c.GRPCAddr()}}); err != nil {
			b.Fatal(err)
		}
		testwait.For(b, 30*time.Second, id+" to own no slot and mirror the rules", func() bool {
			n := -1
			c.fsm.Read(func(st *state.State) {
				if st.Group() == id {
					n = st.OwnedSlots()
				}
			})
			return n == 0 && c.currentRules().Version() == want
		})
	}
	per := shard.Slots / len(fx.groups)
	for g := 1; g < len(fx.groups); g++ {
		first, last := uint32(g*per), uint32((g+1)*per-1)
		mv, err := sc.MoveSlots(ctx, &allotpb.MoveSlotsRequest{First: first, Last: last, To: fx.ids[g]})
		if err != nil {
			b.Fatal(err)
		}
		id := mv.GetMove().GetId()
		testwait.For(b, 60*time.Second, fmt.Sprintf("move %d of slots %d-%d to be done", id, first, last), func() bool {
			m, err := sc.GetShardMap(ctx, &allotpb.GetShardMapRequest{})
			return err == nil && len(m.GetMoves()) >= int(id) && m.GetMoves()[id-1].GetPhase() == allotpb.SlotMove_DONE
		})
	}
	pm, err := sc.GetShardMap(ctx, &allotpb.GetShardMapRequest{})
	if err != nil {
		b.Fatal(err)
	}
	if len(fx.groups) == 1 {
		return nil // never split: no map, as a region started as today
	}
	m, err := shard.FromProto(pm)
	if err != nil {
		b.Fatal(err)
	}
	for _, id := range fx.ids {
		if n := m.Count()[id]; n != per {
			b.Fatalf("group %s owns %d slots after the moves, want %d", id, n, per)
		}
	}
	return m
}

// benchTenants are 64 tenants, 16 in each quarter of the slots, in
// turn: consecutive keys take the quarters in turn, so any four
// consecutive keys spread evenly over 1, 2 or 4 even groups.
func benchTenants() []string {
	const quarters, each = 4, 16
	byQuarter := make([][]string, quarters)
	for i, full := 0, 0; full < quarters; i++ {
		t := fmt.Sprintf("tenant-%d", i)
		q := int(shard.Of(t)) * quarters / shard.Slots
		if len(byQuarter[q]) < each {
			byQuarter[q] = append(byQuarter[q], t)
			if len(byQuarter[q]) == each {
				full++
			}
		}
	}
	var out []string
	for i := 0; i < each; i++ {
		for q := 0; q < quarters; q++ {
			out = append(out, byQuarter[q][i])
		}
	}
	return out
}

// makeAgents gives each agent its keys, a slice of a shared key space
// overlapping its neighbour's (as BenchmarkLeaderLoad), split by group,
// and a connection of its own to each group.
func (fx *shardBench) makeAgents(b *testing.B, m *shard.Map, agents int) {
	tenants := benchTenants()
	group := func(tenant string) int {
		if m == nil {
			return 0
		}
		return slices.Index(fx.ids, m.Route(tenant))
	}
	window := time.Now().Unix()
	for a := 0; a < agents; a++ {
		ag := &benchAgent{}
		admitted := make([]map[string]uint64, len(fx.groups))
		for g := range fx.groups {
			cc, err := grpc.NewClient(fx.groups[g].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
			if err != nil {
				b.Fatal(err)
			}
			fx.conns = append(fx.conns, cc)
			req := &allotpb.ReportRequest{Node: fmt.Sprintf("gw-%d", a), Incarnation: uint64(a + 1), Region: "eu", IntervalNano: int64(time.Second)}
			if m != nil {
				req.Group = fx.ids[g]
			}
			ag.lanes = append(ag.lanes, &benchLane{client: allotpb.NewAgentServiceClient(cc), req: req, index: map[string]*allotpb.KeyDemand{}})
			admitted[g] = map[string]uint64{}
		}
		for k := 0; k < fx.keys; k++ {
			j := a*fx.keys/2 + k
			t := tenants[j%len(tenants)]
			g := group(t)
			l := ag.lanes[g]
			d := &allotpb.KeyDemand{Rule: "api", Key: fmt.Sprintf("%s/user-%d", t, j), Tenant: t, Admitted: 40, Denied: 10, Held: 50}
			l.req.Demand = append(l.req.Demand, d)
			l.index[d.Key] = d
			admitted[g][t] += 40
		}
		for g, l := range ag.lanes {
			if len(l.req.Demand) == 0 {
				b.Fatalf("agent %d has no key for group %s", a, fx.ids[g])
			}
			l.req.Usage = &allotpb.UsageBatch{}
			for _, t := range slices.Sorted(maps.Keys(admitted[g])) {
				l.req.Usage.Counts = append(l.req.Usage.Counts, &allotpb.UsageCount{Rule: "api", Tenant: t, WindowUnix: window, Admitted: admitted[g][t]})
			}
		}
		fx.agents = append(fx.agents, ag)
	}
}

// report sends one lane's report, the next batch of its sequence, and
// holds what was granted, as an agent would, so that unchanged leases
// are renewed rather than re-sent.
func (l *benchLane) report() error {
	l.seq++
	l.req.Usage.Seq = l.seq
	t0 := time.Now()
	resp, err := l.client.Report(context.Background(), l.req)
	if err != nil {
		return fmt.Errorf("report %d to group %q: %w", l.seq, l.req.GetGroup(), err)
	}
	l.lat = append(l.lat, time.Since(t0))
	if resp.GetAckedSeq() < l.seq {
		return fmt.Errorf("group %q acknowledged %d of %d", l.req.GetGroup(), resp.GetAckedSeq(), l.seq)
	}
	for _, ls := range resp.GetLeases() {
		d := l.index[ls.GetKey()]
		d.Held, d.HeldEpoch, d.HeldSeq = ls.GetLimit(), ls.GetEpoch(), ls.GetSeq()
	}
	return nil
}

// round sends an agent's reports to every group at once, as the router
// does, and returns how long the slowest took.
func (ag *benchAgent) round() (time.Duration, error) {
	t0 := time.Now()
	if len(ag.lanes) == 1 {
		err := ag.lanes[0].report()
		return time.Since(t0), err
	}
	errs := make([]error, len(ag.lanes))
	var wg sync.WaitGroup
	for i, l := range ag.lanes {
		wg.Go(func() { errs[i] = l.report() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}

// run is one timed run of b.N agent rounds; it returns the total key
// entries/s.
func (fx *shardBench) run(b *testing.B) float64 {
	for _, ag := range fx.agents {
		for _, l := range ag.lanes {
			l.lat = l.lat[:0]
		}
	}
	var next atomic.Int64
	rounds := make([][]time.Duration, len(fx.agents))
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	start := time.Now()
	for a, ag := range fx.agents {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				d, err := ag.round()
				if err != nil {
					b.Error(err)
					return
				}
				rounds[a] = append(rounds[a], d)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime(b) - cpu0
	b.StopTimer()
	sec := elapsed.Seconds()
	var all, allRounds []time.Duration
	keys := 0
	for g, id := range fx.ids {
		var lat []time.Duration
		n := 0
		for _, ag := range fx.agents {
			lat = append(lat, ag.lanes[g].lat...)
			n += len(ag.lanes[g].lat) * len(ag.lanes[g].req.GetDemand())
		}
		if len(fx.ids) > 1 {
			b.ReportMetric(float64(len(lat))/sec, id+"-reports/s")
			b.ReportMetric(float64(n)/sec, id+"-keys/s")
			b.ReportMetric(quantileMs(lat, 0.5), id+"-p50-ms")
			b.ReportMetric(quantileMs(lat, 0.99), id+"-p99-ms")
		}
		all = append(all, lat...)
		keys += n
	}
	for _, r := range rounds {
		allRounds = append(allRounds, r...)
	}
	b.ReportMetric(float64(len(all))/sec, "reports/s")
	b.ReportMetric(float64(keys)/sec, "keys/s")
	b.ReportMetric(quantileMs(all, 0.5), "p50-ms")
	b.ReportMetric(quantileMs(all, 0.99), "p99-ms")
	b.ReportMetric(quantileMs(allRounds, 0.99), "round-p99-ms")
	b.ReportMetric(cpu.Seconds()/sec, "cpu-cores")
	return float64(keys) / sec
}

// quantileMs is the p quantile of ds in milliseconds (ds is sorted).
func quantileMs(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return float64(ds[int(p*float64(len(ds)-1))]) / float64(time.Millisecond)
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (fx *shardBench) close() {
	for _, cc := range fx.conns {
		cc.Close()
	}
	for i := len(fx.groups) - 1; i >= 0; i-- {
		stop(fx.groups[i])
	}
}
