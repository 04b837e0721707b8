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
)

// TestLeaderLoopsRunInVirtualTime: ledger maintenance follows Config.Clock.
// A window reported on a manual clock set years ahead stays open however
// long the test runs in real time, and becomes final, on the maintain
// ticker, once the clock is advanced past its end and the agent's
// timeout; the ledger keeps what was reported.
func TestLeaderLoopsRunInVirtualTime(t *testing.T) {
	t0 := time.Date(2031, 3, 4, 10, 0, 0, 0, time.UTC)
	clk := timeutil.NewManual(t0)
	c := cluster(t, 1, func(cfg *Config) {
		cfg.Clock = clk
		cfg.BillingWindow = time.Hour
		cfg.AgentTimeout = time.Minute
	})[0]
	cc := allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cc.Report(ctx, &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: "gw-1", Incarnation: 1, Region: "eu-west",
		SentUnixNano: t0.UnixNano(), IntervalNano: int64(200 * time.Millisecond),
		Usage: &allotpb.UsageBatch{Seq: 1, CutUnixNano: t0.UnixNano(), Counts: []*allotpb.UsageCount{
			{Rule: "plan-quota", Tenant: "acme", WindowUnix: t0.Unix(), Admitted: 7},
		}},
	}); err != nil {
		t.Fatal(err)
	}
	line := func() (l ledger.Line, ok bool) {
		c.fsm.Read(func(s *state.State) {
			s.Ledger(func(x ledger.Line) bool {
				if x.Key.Tenant == "acme" {
					l, ok = x, true
				}
				return !ok
			})
		})
		return l, ok
	}
	if l, ok := line(); !ok || l.Admitted != 7 || l.Final || l.Key.Window != t0.Unix() {
		t.Fatalf("after the report: %+v %v, want 7 admitted in the open window at %v", l, ok, t0)
	}
	// The maintain ticker (every minute of virtual time, for an hour's
	// window) has had its timer armed on the manual clock.
	testwait.For(t, 10*time.Second, "the leader's loops waiting on the manual clock", func() bool { return clk.Waiters() >= 2 })
	clk.Advance(59 * time.Minute)
	if l, _ := line(); l.Final {
		t.Fatal("final before its end")
	}
	testwait.For(t, 30*time.Second, "the window final in virtual time", func() bool {
		clk.Advance(time.Minute)
		l, _ := line()
		return l.Final
	})
	if l, _ := line(); l.Admitted != 7 {
		t.Fatalf("final line %+v, want 7 admitted", l)
	}
	if now := clk.Now(); now.Sub(t0) > 3*time.Hour {
		t.Fatalf("advanced to %v to finalize a window that ended at %v", now, t0.Add(time.Hour))
	}
}
