package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/testwait"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestLeaderShedsPastItsBound: on a real leader whose reports wait for a
// round that is far off, the reports past MaxReportsInFlight are answered
// at once, shed: nothing applied (their usage not acknowledged), no lease
// changed, the leases a known node holds renewed for a lease period and
// counted held until then, and a retry_after. A node's first report of the
// term renews nothing: the leader has not counted what it holds.
func TestLeaderShedsPastItsBound(t *testing.T) {
	c, client, ctx := waitingLeader(t, func(c *Config) { c.MaxReportsInFlight = 2 })

	// gw-1 becomes known: its report waits for a round, which the test
	// runs.
	first := make(chan *allotpb.ReportResponse, 1)
	go func() {
		resp, err := client.Report(ctx, apiReport("gw-1", true))
		if err != nil {
			t.Error(err)
		}
		first <- resp
	}()
	testwait.For(t, 10*time.Second, "gw-1's report to wait for its round", c.alloc.Awaited)
	c.alloc.Tick(c.now().UnixNano())
	if resp := <-first; resp.GetShed() || len(resp.GetLeases()) != 1 {
		t.Fatalf("gw-1's first report: %v; want it answered with its lease", resp)
	}

	// Two reports of new nodes fill the intake, waiting for a round.
	for _, node := range []string{"gw-2", "gw-3"} {
		go func() {
			if _, err := client.Report(ctx, apiReport(node, true)); err != nil && ctx.Err() == nil {
				t.Error(err)
			}
		}()
	}
	testwait.For(t, 10*time.Second, "two reports in flight", func() bool { return c.intake.InFlight() == 2 })

	req := apiReport("gw-1", true)
	req.Usage.Seq = 2
	req.Demand[0].Held, req.Demand[0].HeldEpoch, req.Demand[0].HeldSeq = 500, 1, 1
	start := time.Now()
	resp, err := client.Report(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the shed answer took %v", time.Since(start))
	}
	switch {
	case !resp.GetShed():
		t.Fatalf("a report past the bound was taken: %v", resp)
	case resp.GetAckedSeq() >= 2:
		t.Errorf("a shed report's usage was acknowledged (acked %d)", resp.GetAckedSeq())
	case len(resp.GetLeases()) != 0:
		t.Errorf("a shed report was sent leases: %v", resp.GetLeases())
	case resp.GetRetryAfterNano() <= 0:
		t.Errorf("a shed answer without retry_after")
	case resp.GetRenewUnixNano() <= resp.GetCoordinatorUnixNano():
		t.Errorf("a known node's shed answer renews nothing: renew %d, now %d", resp.GetRenewUnixNano(), resp.GetCoordinatorUnixNano())
	}
	if kept := c.alloc.KeptNodes(); kept != 1 {
		t.Errorf("the leader does not count gw-1's renewed leases: %d nodes kept", kept)
	}
	resp, err = client.Report(ctx, apiReport("gw-4", true))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetShed() || resp.GetRenewUnixNano() != 0 {
		t.Errorf("the first report of a node new to the leader, past the bound: shed %v, renew %d; want shed, renewing nothing", resp.GetShed(), resp.GetRenewUnixNano())
	}
	if got := testutil.ToFloat64(c.metrics.reports.WithLabelValues("shed")); got != 2 {
		t.Errorf("allot_coordinator_reports_total{result=shed} = %v; want 2", got)
	}
	// Rounds answer the two waiting reports.
	testwait.For(t, 10*time.Second, "the intake to empty", func() bool {
		c.alloc.Tick(c.now().UnixNano())
		return c.intake.InFlight() == 0
	})
}

// TestReportLeavesWithItsCaller: a report whose caller gives up while it
// waits for its round is dropped: its handler returns, nothing is
// answered, and it leaves the intake.
func TestReportLeavesWithItsCaller(t *testing.T) {
	c := cluster(t, 1, func(c *Config) { c.RoundInterval = time.Hour })[0]
	putRules(t, c, &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second), Burst: 100, Intent: "capacity"})
	testwait.For(t, 10*time.Second, "the leader to install the rule", func() bool { return c.alloc.RuleCount() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr())).Report(ctx, apiReport("gw-1", true))
	if err == nil {
		t.Fatal("a report waiting for a round an hour away was answered")
	}
	testwait.For(t, 10*time.Second, "the report to leave the intake", func() bool { return c.intake.InFlight() == 0 })
	if got := testutil.ToFloat64(c.metrics.leasesGranted); got != 0 {
		t.Errorf("%v leases answered to a caller that had left", got)
	}
}

// TestLeaderShedsPastItsEntryBound: the leader bounds the entries of the
// reports it holds, not only their number: with one report of two entries
// waiting for its round and a bound of three entries, another report of
// two is shed at once, and the first leaves the count when answered.
// Reports at 10,000 tenants carry thousands of keys each, and 512 of them
// held 575 MB on a leader whose count bound was never reached.
func TestLeaderShedsPastItsEntryBound(t *testing.T) {
	c, client, ctx := waitingLeader(t, func(c *Config) { c.MaxReportEntriesInFlight = 3 })

	waiting := make(chan *allotpb.ReportResponse, 1)
	go func() {
		resp, err := client.Report(ctx, apiReport("gw-1", true)) // a demand and a usage count
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		waiting <- resp
	}()
	testwait.For(t, 10*time.Second, "gw-1's report of two entries in flight", func() bool { return c.intake.EntriesInFlight() == 2 })

	resp, err := client.Report(ctx, apiReport("gw-2", true))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetShed() || resp.GetAckedSeq() != 0 {
		t.Fatalf("a report past the entry bound: shed %v, acked %d; want shed, nothing acknowledged", resp.GetShed(), resp.GetAckedSeq())
	}
	if got := testutil.ToFloat64(c.metrics.reports.WithLabelValues("shed")); got != 1 {
		t.Errorf("allot_coordinator_reports_total{result=shed} = %v; want 1", got)
	}
	testwait.For(t, 10*time.Second, "gw-1's report to wait for its round", c.alloc.Awaited)
	c.alloc.Tick(c.now().UnixNano())
	if resp := <-waiting; resp.GetShed() || len(resp.GetLeases()) != 1 {
		t.Fatalf("the report within the bound: %v; want it answered with its lease", resp)
	}
	testwait.For(t, 10*time.Second, "the intake to empty", func() bool {
		return c.intake.InFlight() == 0 && c.intake.EntriesInFlight() == 0
	})
}

// waitingLeader starts a one-member cluster, configured by mod, whose
// reports wait for their round until the test runs one, with a tenant
// rule "api" installed; and a client of it, and a context for its calls.
func waitingLeader(t *testing.T, mod func(*Config)) (*Coordinator, allotpb.AgentServiceClient, context.Context) {
	t.Helper()
	c := cluster(t, 1, func(c *Config) {
		mod(c)
		c.RoundInterval = time.Hour // reports wait for their round until the test lets them go
	})[0]
	putRules(t, c, &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second), Burst: 100, Intent: "capacity"})
	testwait.For(t, 10*time.Second, "the leader to install the rule", func() bool { return c.alloc.RuleCount() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c, allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr())), ctx
}
