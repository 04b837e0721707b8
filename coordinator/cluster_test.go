package coordinator

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/testwait"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// testConfig is a member configuration for loopback tests: free ports,
// a temporary data dir and Raft timeouts short enough for tests.
func testConfig(t *testing.T, id, dir string) Config {
	t.Helper()
	level := hclog.Off
	if os.Getenv("ALLOT_TEST_LOG") != "" {
		level = hclog.Debug
	}
	// Ports by number, below the ephemeral range (freePorts): a member a
	// test stops and starts again keeps its addresses.
	ports := freePorts(t, 3)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	return Config{
		NodeID: id, DataDir: dir, Region: "eu-west",
		RaftAddr: addr(0), GRPCAddr: addr(1), HTTPAddr: addr(2),
		ReportInterval: 200 * time.Millisecond, ApplyWindow: 5 * time.Millisecond,
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		Logger: hclog.New(&hclog.LoggerOptions{Name: id, Level: level}),
	}
}

func start(t *testing.T, cfg Config) *Coordinator {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("starting %s: %v", cfg.NodeID, err)
	}
	t.Cleanup(func() { stop(c) })
	return c
}

func stop(c *Coordinator) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// cluster starts n members: the first bootstraps, the others join through
// it. It returns once every member knows the leader and all n are voters.
func cluster(t *testing.T, n int, mod func(*Config)) []*Coordinator {
	t.Helper()
	var nodes []*Coordinator
	for i := 0; i < n; i++ {
		cfg := testConfig(t, fmt.Sprintf("n%d", i+1), t.TempDir())
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = []string{nodes[0].GRPCAddr()}
		}
		if mod != nil {
			mod(&cfg)
		}
		nodes = append(nodes, start(t, cfg))
		if i == 0 {
			waitLeader(t, nodes[:1])
		}
	}
	testwait.For(t, 30*time.Second, "every member to join as a voter and know the leader", func() bool {
		for _, c := range nodes {
			if id, addr := c.Leader(); id == "" || addr == "" || voters(c.members()) != n {
				return false
			}
		}
		return leader(nodes) != nil
	})
	return nodes
}

// voters counts the voting members.
func voters(ms []*allotpb.Member) (n int) {
	for _, m := range ms {
		if m.GetVoter() {
			n++
		}
	}
	return n
}

func waitLeader(t *testing.T, nodes []*Coordinator) *Coordinator {
	t.Helper()
	var l *Coordinator
	testwait.For(t, 30*time.Second, "a ready leader", func() bool { l = leader(nodes); return l != nil })
	return l
}

func leader(nodes []*Coordinator) *Coordinator {
	for _, c := range nodes {
		if !c.closed.Load() && c.IsLeader() {
			return c
		}
	}
	return nil
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

var quotaRule = &allotpb.Rule{Name: "plan-quota", Scope: "tenant", Algorithm: "sliding_window", Limit: 1000, Period: durationpb.New(time.Minute), Intent: "quota"}

// TestClusterRulesOnFollower: a rule written through a follower is
// forwarded to the leader and readable on every member.
func TestClusterRulesOnFollower(t *testing.T) {
	nodes := cluster(t, 3, nil)
	var follower *Coordinator
	for _, c := range nodes {
		if !c.IsLeader() {
			follower = c
		}
	}
	client := allotpb.NewRulesServiceClient(dial(t, follower.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	set, err := client.PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{quotaRule}})
	if err != nil {
		t.Fatalf("PutRules on a follower: %v", err)
	}
	if len(set.GetRules()) != 1 || set.GetVersion() != 1 {
		t.Fatalf("PutRules returned %v", set)
	}
	for _, c := range nodes {
		testwait.For(t, 10*time.Second, c.ID()+" to see the rule", func() bool {
			got, err := allotpb.NewRulesServiceClient(dial(t, c.GRPCAddr())).GetRule(ctx, &allotpb.GetRuleRequest{Name: "plan-quota"})
			return err == nil && got.GetLimit() == 1000
		})
	}
}

// TestClusterRejectsBadRules: validation errors come back as
// INVALID_ARGUMENT naming the field, and nothing is applied.
func TestClusterRejectsBadRules(t *testing.T) {
	nodes := cluster(t, 1, nil)
	client := allotpb.NewRulesServiceClient(dial(t, nodes[0].GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bad := &allotpb.Rule{Name: "x", Scope: "tenant", Algorithm: "gcra", Limit: 10, Period: durationpb.New(-time.Second), Intent: "quota"}
	_, err := client.PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{quotaRule, bad}})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !containsField(st, "rules[x].period") {
		t.Fatalf("got %v %q %v; want INVALID_ARGUMENT naming rules[x].period", st.Code(), st.Message(), st.Details())
	}
	if set, _ := client.ListRules(ctx, &allotpb.ListRulesRequest{}); len(set.GetRules()) != 0 {
		t.Fatalf("a refused change was partly applied: %v", set)
	}
}

// TestClusterAdminToken: with only an admin token configured, every call
// but health checks needs it: UNAUTHENTICATED without.
func TestClusterAdminToken(t *testing.T) {
	nodes := cluster(t, 1, func(c *Config) { c.AdminToken = "s3cret" })
	client := allotpb.NewRulesServiceClient(dial(t, nodes[0].GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{quotaRule}}
	if _, err := client.PutRules(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without a token: %v", err)
	}
	if _, err := client.PutRules(withToken(ctx, "wrong"), req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("with a wrong token: %v", err)
	}
	if _, err := client.PutRules(withToken(ctx, "s3cret"), req); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	if _, err := client.ListRules(ctx, &allotpb.ListRulesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a read without the token: %v", err)
	}
	if _, err := client.ListRules(withToken(ctx, "s3cret"), &allotpb.ListRulesRequest{}); err != nil {
		t.Fatalf("a read with the token: %v", err)
	}
}

// agentSim is a minimal agent for tests: it keeps one usage batch until it
// is acknowledged, follows the leader, and fails over among members.
type agentSim struct {
	node        string
	region      string // "" reports as eu-west
	incarnation uint64
	addrs       []string
	conns       map[string]allotpb.AgentServiceClient
	t           *testing.T

	mu      sync.Mutex
	seq     uint64
	pending *allotpb.UsageBatch // sent, not yet acknowledged
	acked   uint64              // admitted cost acknowledged by the cluster
}

func newAgentSim(t *testing.T, node string, addrs []string) *agentSim {
	a := &agentSim{t: t, node: node, incarnation: uint64(time.Now().UnixNano()), addrs: addrs, conns: map[string]allotpb.AgentServiceClient{}}
	for _, addr := range addrs {
		a.conns[addr] = allotpb.NewAgentServiceClient(dial(t, addr))
	}
	return a
}

// report sends one report, with a new batch of `admitted` cost if the
// previous one was acknowledged, and returns whether it was acknowledged.
func (a *agentSim) report(ctx context.Context, tenant string, admitted uint64, demand []*allotpb.KeyDemand) (*allotpb.ReportResponse, error) {
	a.mu.Lock()
	if a.pending == nil && admitted > 0 {
		a.seq++
		a.pending = &allotpb.UsageBatch{Seq: a.seq, CutUnixNano: time.Now().UnixNano(), Counts: []*allotpb.UsageCount{
			{Rule: "plan-quota", Tenant: tenant, WindowUnix: time.Now().Unix(), Admitted: admitted},
		}}
	}
	req := &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: a.node, Incarnation: a.incarnation, Region: cmp.Or(a.region, "eu-west"),
		IntervalNano: int64(200 * time.Millisecond), Usage: a.pending, Demand: demand, SentUnixNano: time.Now().UnixNano(),
	}
	a.mu.Unlock()
	var lastErr error
	for _, addr := range a.addrs {
		var trailer metadata.MD
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := a.conns[addr].Report(cctx, req, grpc.Trailer(&trailer))
		if err != nil && len(trailer.Get(LeaderTrailer)) > 0 {
			if c, ok := a.conns[trailer.Get(LeaderTrailer)[0]]; ok {
				resp, err = c.Report(cctx, req)
			}
		}
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		a.mu.Lock()
		if a.pending != nil && resp.GetAckedSeq() >= a.pending.GetSeq() {
			a.acked += a.pending.GetCounts()[0].GetAdmitted()
			a.pending = nil
		}
		a.mu.Unlock()
		return resp, nil
	}
	return nil, lastErr
}

// TestClusterFailoverLosesNothing kills the leader while agents report:
// a new leader takes over, and the ledger equals exactly the sum of the
// usage the cluster acknowledged: nothing lost, nothing counted twice.
func TestClusterFailoverLosesNothing(t *testing.T) {
	nodes := cluster(t, 3, nil)
	addrs := []string{nodes[0].GRPCAddr(), nodes[1].GRPCAddr(), nodes[2].GRPCAddr()}
	agents := []*agentSim{newAgentSim(t, "gw-1", addrs), newAgentSim(t, "gw-2", addrs), newAgentSim(t, "gw-3", addrs)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := uint64(1); ctx.Err() == nil; n++ {
				_, _ = a.report(ctx, "acme", n%7+uint64(i), nil)
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	old := waitLeader(t, nodes)
	testwait.For(t, 10*time.Second, "usage to flow", func() bool { return agents[0].ackedTotal() > 50 })
	next, rest := failOver(t, nodes, old, agents[0], 50)
	cancel()
	wg.Wait()
	want := flushAgents(t, agents)
	for _, c := range rest {
		testwait.For(t, 10*time.Second, c.ID()+" to apply everything", func() bool {
			got, _ := ledgerTotal(c.fsm, "acme")
			return got == want
		})
		if got, _ := ledgerTotal(c.fsm, "acme"); got != want {
			t.Fatalf("%s ledger %d, acknowledged %d", c.ID(), got, want)
		}
	}
	if next.Status().GetEpoch() < 2 {
		t.Errorf("the new leader did not start a new epoch: %d", next.Status().GetEpoch())
	}
	t.Logf("acknowledged and ledgered exactly %d units across the failover", want)
}

// failOver stops old, waits for a leader among the rest and for a's
// usage to grow by n through it, and returns the new leader and the rest.
func failOver(t *testing.T, nodes []*Coordinator, old *Coordinator, a *agentSim, n uint64) (*Coordinator, []*Coordinator) {
	t.Helper()
	stop(old)
	var rest []*Coordinator
	for _, c := range nodes {
		if c != old {
			rest = append(rest, c)
		}
	}
	next := waitLeader(t, rest)
	before := a.ackedTotal()
	testwait.For(t, 20*time.Second, "usage to flow through the new leader", func() bool { return a.ackedTotal() > before+n })
	return next, rest
}

// flushAgents has every agent's pending batch acknowledged and returns
// the usage the cluster acknowledged in all.
func flushAgents(t *testing.T, agents []*agentSim) (acked uint64) {
	t.Helper()
	for _, a := range agents {
		testwait.For(t, 20*time.Second, a.node+"'s last batch to be acknowledged", func() bool {
			_, err := a.report(context.Background(), "", 0, nil)
			return err == nil && a.pendingBatch() == nil
		})
		acked += a.ackedTotal()
	}
	return acked
}

func (a *agentSim) ackedTotal() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acked
}

func (a *agentSim) pendingBatch() *allotpb.UsageBatch {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pending
}

// TestClusterRestartCatchesUp stops a follower, writes while it is down,
// restarts it from its data dir, and checks it catches up — including
// from a snapshot once the log has been compacted.
func TestClusterRestartCatchesUp(t *testing.T) {
	nodes := cluster(t, 3, func(c *Config) { c.SnapshotThreshold = 64; c.SnapshotInterval = 200 * time.Millisecond })
	l := waitLeader(t, nodes)
	var f *Coordinator
	for _, c := range nodes {
		if c != l {
			f = c
			break
		}
	}
	fcfg := f.cfg
	fcfg.RaftAddr, fcfg.GRPCAddr, fcfg.HTTPAddr = f.RaftAddr(), f.GRPCAddr(), f.HTTPAddr()
	stop(f)
	// Both members left: two of three still elect, and may have to, when
	// a loaded machine delays a heartbeat past the leader's lease ("no
	// leader elected yet" failed the test at its first report). A report
	// the cluster did not answer stays pending and goes again.
	var up []string
	for _, c := range nodes {
		if c != f {
			up = append(up, c.GRPCAddr())
		}
	}
	agent := newAgentSim(t, "gw-1", up)
	for i := 0; i < 300; i++ {
		testwait.For(t, 20*time.Second, fmt.Sprintf("report %d to be answered", i), func() bool {
			_, err := agent.report(context.Background(), "acme", 3, nil)
			if c := status.Code(err); err != nil && c != codes.Unavailable && c != codes.DeadlineExceeded {
				t.Fatal(err)
			}
			return err == nil
		})
	}
	want := agent.ackedTotal()
	if err := l.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	g := start(t, fcfg)
	testwait.For(t, 20*time.Second, "the restarted follower to catch up", func() bool {
		got, _ := ledgerTotal(g.fsm, "acme")
		return got == want
	})
	var a, b string
	l.fsm.Read(func(s *state.State) { a = dumpState(s) })
	g.fsm.Read(func(s *state.State) { b = dumpState(s) })
	if a != b {
		t.Fatalf("restarted follower's state differs from the leader's")
	}
}

// TestReportValidation: malformed reports are refused with the field named
// and counted; oversized ones too; none crashes the node.
func TestReportValidation(t *testing.T) {
	nodes := cluster(t, 1, func(c *Config) { c.MaxReportBytes = 64 << 10; c.MaxReportKeys = 100 })
	c := nodes[0]
	client := allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok := func() *allotpb.ReportRequest {
		return &allotpb.ReportRequest{Node: "gw-1", Incarnation: 1, IntervalNano: int64(time.Second)}
	}
	tests := []struct {
		name  string
		mod   func(*allotpb.ReportRequest)
		field string
	}{
		{"no node", func(r *allotpb.ReportRequest) { r.Node = "" }, "node"},
		{"no incarnation", func(r *allotpb.ReportRequest) { r.Incarnation = 0 }, "incarnation"},
		{"negative interval", func(r *allotpb.ReportRequest) { r.IntervalNano = -1 }, "interval_nano"},
		{"NaN demand", func(r *allotpb.ReportRequest) {
			r.Demand = []*allotpb.KeyDemand{{Rule: "r", Key: "k", Admitted: nanValue()}}
		}, "demand[0].admitted"},
		{"negative held", func(r *allotpb.ReportRequest) { r.Demand = []*allotpb.KeyDemand{{Rule: "r", Held: -1}} }, "demand[0].held"},
		{"huge key", func(r *allotpb.ReportRequest) {
			r.Demand = []*allotpb.KeyDemand{{Rule: "r", Key: string(make([]byte, 5000))}}
		}, "demand[0].key"},
		{"too many keys", func(r *allotpb.ReportRequest) {
			for i := 0; i < 101; i++ {
				r.Demand = append(r.Demand, &allotpb.KeyDemand{Rule: "r", Key: fmt.Sprint(i)})
			}
		}, "demand"},
		{"usage without rule", func(r *allotpb.ReportRequest) {
			r.Usage = &allotpb.UsageBatch{Seq: 1, Counts: []*allotpb.UsageCount{{Tenant: "a"}}}
		}, "usage.counts[0].rule"},
	}
	for _, tt := range tests {
		req := ok()
		tt.mod(req)
		_, err := client.Report(ctx, req)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !containsField(st, tt.field) {
			t.Errorf("%s: got %v %q; want INVALID_ARGUMENT naming %s", tt.name, st.Code(), st.Message(), tt.field)
		}
	}
	big := ok()
	big.Demand = []*allotpb.KeyDemand{{Rule: "r", Key: string(make([]byte, 100<<10))}}
	if _, err := client.Report(ctx, big); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized report: %v", err)
	}
	if _, err := client.Report(ctx, ok()); err != nil {
		t.Fatalf("a good report after the bad ones: %v", err)
	}
	testwait.For(t, 5*time.Second, "rejections to be counted", func() bool {
		return counterValue(t, c, "allot_coordinator_reports_total", "result", "invalid") == float64(len(tests)) &&
			counterValue(t, c, "allot_coordinator_reports_total", "result", "too_large") == 1
	})
}

// TestFollowerRedirectsAgents: a follower refuses a report and names the
// leader in the trailer.
func TestFollowerRedirectsAgents(t *testing.T) {
	nodes := cluster(t, 3, nil)
	l := waitLeader(t, nodes)
	for _, c := range nodes {
		if c == l {
			continue
		}
		var trailer metadata.MD
		_, err := allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr())).Report(context.Background(),
			&allotpb.ReportRequest{Node: "gw", Incarnation: 1}, grpc.Trailer(&trailer))
		if status.Code(err) != codes.Unavailable || len(trailer.Get(LeaderTrailer)) == 0 || trailer.Get(LeaderTrailer)[0] != l.GRPCAddr() {
			t.Errorf("follower %s: %v, trailer %v; want UNAVAILABLE naming %s", c.ID(), err, trailer, l.GRPCAddr())
		}
	}
}

// containsField reports whether a status carries a BadRequest violation for
// the field.
func containsField(st *status.Status, field string) bool {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field {
					return true
				}
			}
		}
	}
	return false
}

func nanValue() float64 {
	zero := 0.0
	return zero / zero
}

// counterValue reads one labelled counter from a coordinator's registry;
// with label "", an unlabelled one.
func counterValue(t *testing.T, c *Coordinator, name, label, value string) float64 {
	t.Helper()
	mfs, err := c.gather.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" {
				return m.GetCounter().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
