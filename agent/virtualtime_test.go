package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// countingTransport answers every report, acknowledging its usage, and
// counts them.
type countingTransport struct{ reports atomic.Int64 }

func (c *countingTransport) Report(_ context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	c.reports.Add(1)
	resp := &allotpb.ReportResponse{Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1}
	if u := req.GetUsage(); u != nil {
		resp.AckedSeq = u.GetSeq()
	}
	return resp, nil
}

// TestReportsInVirtualTime: on a manual clock the agent's reporter runs
// in virtual time: nothing is reported until the clock passes an
// interval, and then one report is, with no sleep in between.
func TestReportsInVirtualTime(t *testing.T) {
	clk := newManualClock()
	tr := &countingTransport{}
	a, err := New(Config{NodeID: "gw-1", Region: "eu-west", Clock: clk, ReportInterval: time.Second, Transport: tr,
		Rules: []rules.Rule{rule("api", rules.Tenant, algo.GCRA, 100, time.Second, lease.Capacity)}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	testwait.For(t, 10*time.Second, "the first report and the loops' timers", func() bool { return tr.reports.Load() == 1 && clk.Waiters() >= 3 })
	for i := int64(2); i <= 5; i++ {
		clk.Advance(time.Second)
		testwait.For(t, 10*time.Second, "a report per interval of virtual time", func() bool { return tr.reports.Load() == i })
	}
	clk.Advance(999 * time.Millisecond)
	if n := tr.reports.Load(); n != 5 {
		t.Fatalf("%d reports before the next interval, want 5", n)
	}
}
