package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/internal/timeutil"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// sheddingTransport answers from an Engine until shed is set, then as an
// overloaded leader does: at once, without taking the report, renewing
// the leases held for a lease period.
type sheddingTransport struct {
	e    *allocator.Engine
	clk  *timeutil.Manual
	shed atomic.Bool
	sent atomic.Int64 // reports shed
}

func (t *sheddingTransport) Report(_ context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	if !t.shed.Load() {
		return t.e.Report(t.clk.Now(), req)
	}
	t.sent.Add(1)
	now := t.clk.Now()
	return &allotpb.ReportResponse{Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Shed: true, Epoch: 1,
		RetryAfterNano: int64(time.Second), RenewUnixNano: now.Add(5 * time.Second).UnixNano(), CoordinatorUnixNano: now.UnixNano()}, nil
}

// TestShedAnswersKeepLeases: while an overloaded leader sheds every
// report, the agent keeps enforcing the lease it holds, for as long as
// the shed answers renew it (here 20 s, four lease periods), instead of
// falling back to its unleased share; its usage stays pending and goes
// with the first report taken again; it says so in its metrics, and asks
// nothing early meanwhile.
func TestShedAnswersKeepLeases(t *testing.T) {
	clk := newManualClock()
	r := rule("api", rules.Tenant, algo.TokenBucket, 1000, time.Second, lease.Capacity)
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	tr := &sheddingTransport{e: eng, clk: clk}
	reg := prometheus.NewRegistry()
	a := engineAgent(t, eng, clk, "gw-1", "eu-west", r, func(c *Config) { c.Transport, c.Registerer = byHand{tr}, reg })
	report := func() {
		for x := a.prepareReport(false); x != nil; x = x.next {
			resp, err := tr.Report(context.Background(), x.req)
			a.deliver(x, resp, err)
		}
	}
	// Two nodes' worth of fleet, so that the unleased share is half.
	for range 5 {
		for range 100 {
			a.Check(Request{Tenant: "acme"})
			clk.Advance(5 * time.Millisecond)
		}
		report()
		eng.Round(clk.Now())
	}
	held, ok := a.Lease("api", "acme")
	if !ok || held < 500 {
		t.Fatalf("before the leader sheds: lease %v (%v); want one of at least 500", held, ok)
	}
	tr.shed.Store(true)
	for i := range 20 {
		for range 100 {
			a.Check(Request{Tenant: "acme"})
			clk.Advance(10 * time.Millisecond)
		}
		report()
		if a.wantsEarlyReport() {
			t.Fatalf("second %d of shedding: the agent asks for an early report", i+1)
		}
		if got, ok := a.Lease("api", "acme"); !ok || got != held {
			t.Fatalf("second %d of shedding: lease %v (%v); want the %v held kept", i+1, got, ok, held)
		}
	}
	if st := a.Status(); st.PendingBatches == 0 {
		t.Errorf("no usage pending after 20 s of shed reports")
	}
	if got := testutil.ToFloat64(a.metrics.reports.WithLabelValues("shed")); got != float64(tr.sent.Load()) || got == 0 {
		t.Errorf("allot_agent_reports_total{result=shed} = %v; %d reports were shed", got, tr.sent.Load())
	}
	tr.shed.Store(false)
	report() // the batch sealed at the first shed report
	report() // what was counted since
	if st := a.Status(); st.PendingBatches != 0 {
		t.Errorf("%d batches still pending after two reports were taken", st.PendingBatches)
	}
	admitted, _ := eng.Usage("acme", "api")
	if admitted != 2500 {
		t.Errorf("the ledger holds %d admitted; the agent admitted 2500", admitted)
	}
}
