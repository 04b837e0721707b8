package coordinator

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/testwait"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// isolateLeader starts a 3-member cluster with a leader lease long enough
// for a test to act inside it, puts a capacity rule, and then shuts down
// Raft on both followers: the leader can no longer commit anything and
// will step down within its lease, but until then it still believes it
// leads.
func isolateLeader(t *testing.T) *Coordinator {
	t.Helper()
	nodes := cluster(t, 3, func(c *Config) {
		c.HeartbeatTimeout, c.ElectionTimeout = time.Second, time.Second
	})
	l := waitLeader(t, nodes)
	putRules(t, l, &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second), Burst: 100, Intent: "capacity"})
	testwait.For(t, 10*time.Second, "the leader to install the rule", func() bool { return l.alloc.RuleCount() == 1 })
	for _, c := range nodes {
		if c != l {
			if err := c.raft.Shutdown().Error(); err != nil {
				t.Fatalf("shutting down %s's raft: %v", c.ID(), err)
			}
		}
	}
	return l
}

func apiReport(node string, usage bool) *allotpb.ReportRequest {
	req := &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: node, Incarnation: 1, Region: "eu-west",
		IntervalNano: int64(200 * time.Millisecond),
		Demand:       []*allotpb.KeyDemand{{Rule: "api", Key: "acme", Tenant: "acme", Admitted: 500, Denied: 100}},
	}
	if usage {
		req.Usage = &allotpb.UsageBatch{Seq: 1, CutUnixNano: time.Now().UnixNano(), Counts: []*allotpb.UsageCount{
			{Rule: "api", Tenant: "acme", WindowUnix: time.Now().Unix(), Admitted: 500, Denied: 100},
		}}
	}
	return req
}

// TestReportGrantsOnlyAfterCommit: a report whose usage batch cannot be
// committed is refused, and its demand re-divides nothing: no pool, no
// claim, no lease.
func TestReportGrantsOnlyAfterCommit(t *testing.T) {
	l := isolateLeader(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := allotpb.NewAgentServiceClient(dial(t, l.GRPCAddr())).Report(ctx, apiReport("gw-1", true))
	if err == nil {
		t.Fatalf("a report whose usage could not be committed was answered: %v", resp)
	}
	if code := status.Code(err); code != codes.Unavailable && code != codes.FailedPrecondition {
		t.Errorf("got %v; want UNAVAILABLE or FAILED_PRECONDITION", err)
	}
	if n := l.alloc.ActiveKeys(); n != 0 {
		t.Fatalf("the allocator divided %d pools for a report whose usage was never committed", n)
	}
}

// TestDeposedLeaderDoesNotAnswer: a leader cut off from its followers
// refuses a report without usage instead of answering it from its stale
// state, although it has not yet noticed that it lost its quorum.
func TestDeposedLeaderDoesNotAnswer(t *testing.T) {
	l := isolateLeader(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := allotpb.NewAgentServiceClient(dial(t, l.GRPCAddr())).Report(ctx, apiReport("gw-1", false))
	if err == nil {
		t.Fatalf("a leader without a quorum answered a report: %v", resp)
	}
	if code := status.Code(err); code != codes.Unavailable && code != codes.FailedPrecondition {
		t.Errorf("got %v; want UNAVAILABLE or FAILED_PRECONDITION", err)
	}
	if n := l.alloc.ActiveKeys(); n != 0 {
		t.Errorf("a leader without a quorum divided %d pools", n)
	}
}

// TestLeaderGaugesResetOnStepDown: the leader-only gauges (agents, keys,
// learning) read 0 on a member once it has lost leadership, so that a
// dashboard summing them over members does not count a former leader's
// last values as a second leader's.
func TestLeaderGaugesResetOnStepDown(t *testing.T) {
	nodes := cluster(t, 3, nil)
	l := waitLeader(t, nodes)
	putRules(t, l, &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second), Burst: 100, Intent: "capacity"})
	a := newAgentSim(t, "gw-1", []string{l.GRPCAddr()})
	testwait.For(t, 10*time.Second, "the leader to count the agent and its key", func() bool {
		if _, err := a.report(context.Background(), "", 0, []*allotpb.KeyDemand{demand("api", "acme", 10, 0, 0)}); err != nil {
			return false
		}
		return testutil.ToFloat64(l.metrics.activeAgents) == 1 && testutil.ToFloat64(l.metrics.activeKeys) == 1
	})
	if err := l.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the former leader's gauges to read 0", func() bool {
		return !l.IsLeader() && testutil.ToFloat64(l.metrics.activeAgents) == 0 && testutil.ToFloat64(l.metrics.activeKeys) == 0
	})
}

// TestCountersStartAtZero: the counters alerts watch have every known
// label value from the start, at 0, so that increase() over a window
// sees the first invalid, too large or failed report.
func TestCountersStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	newMetrics(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				series[f.GetName()+"/"+l.GetValue()]++
			}
		}
	}
	for _, want := range []string{
		"allot_coordinator_reports_total/invalid", "allot_coordinator_reports_total/too_large", "allot_coordinator_reports_total/failed",
		"allot_coordinator_reports_total/forbidden", "allot_coordinator_reports_total/new_node_limit",
		"allot_coordinator_commands_applied_total/reports", "allot_coordinator_commands_applied_total/grants",
		"allot_coordinator_admin_requests_total/PutRules", "allot_coordinator_parent_reports_total/failed",
		"allot_coordinator_rlqs_requests_total/refused", "allot_coordinator_new_nodes_total/refused",
	} {
		if series[want] == 0 {
			t.Errorf("no %s series at start", want)
		}
	}
}

// TestCloseWhileANewLeaderCatchesUp: a member closed while its new term's
// catch-up barrier waits behind entries its state machine has not yet
// applied still closes. Raft's apply goroutine returns on shutdown and
// leaves the barrier unanswered; waited on bare, it held Close (and a
// make test run) for nine minutes.
//
// The member restarts from its data dir, so that as the only voter it
// leads at once and re-applies its log behind the barrier; its first
// entry is held until Raft is shutting down. Whether the stranded barrier
// is the next thing Raft's apply goroutine reads or its shutdown is a
// coin toss (a select with both ready), so the story runs four times.
func TestCloseWhileANewLeaderCatchesUp(t *testing.T) {
	for range 4 {
		cfg := testConfig(t, "n1", t.TempDir())
		cfg.Bootstrap = true
		c := start(t, cfg)
		l := waitLeader(t, []*Coordinator{c})
		putRules(t, l, &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second), Burst: 100, Intent: "capacity"})
		stop(c)
		last := c.raft.LastIndex()

		cfg.Bootstrap = false
		var member atomic.Pointer[Coordinator] // set once started; the hook may run before
		cfg.hooks = &testHooks{beforeApply: func(*raft.Log) {
			for c := member.Load(); c == nil || c.raft.State() != raft.Shutdown; c = member.Load() {
				time.Sleep(time.Millisecond)
			}
		}}
		restarted := start(t, cfg)
		member.Store(restarted)
		// The new term's no-op and the barrier after it are in the log.
		testwait.For(t, 10*time.Second, "the restarted member to take its catch-up barrier", func() bool {
			return restarted.raft.LastIndex() >= last+2
		})
		closed := make(chan struct{})
		go func() { stop(restarted); close(closed) }()
		select {
		case <-closed:
		case <-time.After(time.Minute):
			t.Fatal("Close did not return: a wait on a barrier Raft's shutdown left unanswered")
		}
	}
}
