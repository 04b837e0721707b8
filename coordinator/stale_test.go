package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/internal/timeutil"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestForgottenIncarnationStaleBatch: an agent whose batch was applied,
// its answer lost, and which was then cut off for longer than its
// incarnation is kept, sends the batch again: the leader refuses it as
// stale, with the reason an agent acts on, and counts none of it; sent
// again, it is acknowledged; the incarnation's next batch, sealed with it
// a day ago and never sent, is counted once.
func TestForgottenIncarnationStaleBatch(t *testing.T) {
	t0 := time.Date(2031, 3, 4, 10, 0, 0, 0, time.UTC)
	clk := timeutil.NewManual(t0)
	c := cluster(t, 1, func(cfg *Config) { cfg.Clock = clk })[0]
	cc := allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	report := func(sent time.Time, seq, admitted uint64) (*allotpb.ReportResponse, error) {
		return cc.Report(ctx, &allotpb.ReportRequest{
			Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: "gw-1", Incarnation: 5, Region: "eu-west",
			SentUnixNano: sent.UnixNano(), IntervalNano: int64(time.Second),
			Usage: &allotpb.UsageBatch{Seq: seq, CutUnixNano: t0.UnixNano(), Counts: []*allotpb.UsageCount{
				{Rule: "plan-quota", Tenant: "acme", WindowUnix: t0.Unix(), Admitted: admitted},
			}},
		})
	}
	admitted := func() (n uint64) {
		c.fsm.Read(func(s *state.State) {
			s.Ledger(func(l ledger.Line) bool {
				if l.Key.Tenant == "acme" {
					n += l.Admitted
				}
				return true
			})
		})
		return n
	}
	if _, err := report(t0, 1, 7); err != nil { // the answer is lost
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the leader's loops waiting on the manual clock", func() bool { return clk.Waiters() >= 2 })
	clk.Advance(25 * time.Hour)
	testwait.For(t, 30*time.Second, "the silent incarnation forgotten", func() bool {
		var known bool
		c.fsm.Read(func(s *state.State) { _, known = s.LastSeq("gw-1", 5) })
		if known {
			clk.Advance(time.Minute)
		}
		return !known
	})
	back := clk.Now()
	_, err := report(back, 1, 7)
	st := status.Convert(err)
	var reason string
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == allotpb.ErrorDomain {
			reason = ei.GetReason()
		}
	}
	if st.Code() != codes.FailedPrecondition || reason != allotpb.ReasonStaleBatch {
		t.Fatalf("the batch sent again after a day: %v (reason %q); want FAILED_PRECONDITION, %s", err, reason, allotpb.ReasonStaleBatch)
	}
	if resp, err := report(back, 1, 7); err != nil || resp.GetAckedSeq() != 1 {
		t.Fatalf("the stale batch sent once more: %v, acked %d; want it acknowledged", err, resp.GetAckedSeq())
	}
	if n := admitted(); n != 7 {
		t.Fatalf("acme has %d admitted in the ledger, want the 7 counted once", n)
	}
	if resp, err := report(back, 2, 3); err != nil || resp.GetAckedSeq() != 2 {
		t.Fatalf("the next batch: %v, acked %d", err, resp.GetAckedSeq())
	}
	if n := admitted(); n != 10 {
		t.Fatalf("acme has %d admitted in the ledger, want 10", n)
	}
	if n := counterValue(t, c, "allot_coordinator_reports_total", "result", "stale"); n != 1 {
		t.Fatalf("%v reports counted stale, want 1", n)
	}
}
