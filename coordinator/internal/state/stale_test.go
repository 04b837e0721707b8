package state

import (
	"slices"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
)

// TestStateForgottenIncarnationNeverCountsTwice: an agent whose batch
// was applied but whose acknowledgement was lost, cut off for longer than
// its incarnation is kept, sends the batch again: it is refused as stale,
// recorded as applied and counted once, and so is every later sending of
// it; the incarnation's later batches, cut as long ago or not, are each
// counted once; a new incarnation's batch is counted. A command of a
// leader from before stale batches were refused applies it, as that
// leader's followers did.
func TestStateForgottenIncarnationNeverCountsTwice(t *testing.T) {
	batch := func(proposed, cut time.Time, inc, seq, admitted uint64, refuseStale bool) *fsmpb.ReportsCommand {
		cmd := &fsmpb.ReportsCommand{ProposedUnixNano: proposed.UnixNano(), Reports: []*fsmpb.AgentUsage{{
			Node: "gw-1", Incarnation: inc, Region: "eu-west",
			Batch: &allotpb.UsageBatch{Seq: seq, CutUnixNano: cut.UnixNano(), Counts: []*allotpb.UsageCount{
				{Rule: "plan-quota", Tenant: "acme", WindowUnix: cut.Unix(), Admitted: admitted},
			}},
		}}}
		if refuseStale {
			cmd.StaleBeforeUnixNano = StaleBefore(proposed.UnixNano())
		}
		return cmd
	}
	uncut := func(cmd *fsmpb.ReportsCommand) *fsmpb.ReportsCommand {
		cmd.Reports[0].Batch.CutUnixNano = 0
		return cmd
	}
	f := testFSM()
	apply := func(cmd *fsmpb.ReportsCommand) *fsmpb.ReportsResult {
		return f.Apply(entry(t, 0, CmdReports, cmd)).(*fsmpb.ReportsResult)
	}
	cut := hour0
	if res := apply(batch(cut, cut, 7, 1, 100, true)); len(res.GetStale()) != 0 || res.GetAckedSeq()[0] != 1 {
		t.Fatalf("the first batch: %v", res)
	}
	// The answer is lost; the agent is cut off for 25 hours, and its
	// incarnation is forgotten.
	back := hour0.Add(25 * time.Hour)
	f.Apply(entry(t, 0, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: back.UnixNano(), AgentTimeoutNano: int64(15 * time.Minute)}))
	if _, ok := f.st.LastSeq("gw-1", 7); ok {
		t.Fatal("the incarnation silent for 25 hours is still kept")
	}
	for i, step := range []struct {
		name     string
		cmd      *fsmpb.ReportsCommand
		stale    bool
		acked    uint64
		admitted uint64 // acme's total after it
	}{
		{"the batch sent again", batch(back, cut, 7, 1, 100, true), true, 1, 100},
		{"and again", batch(back.Add(time.Second), cut, 7, 1, 100, true), false, 1, 100},
		{"its next batch, sealed with it, never sent", batch(back.Add(2*time.Second), cut, 7, 2, 10, true), false, 2, 110},
		{"a batch cut now", batch(back.Add(3*time.Second), back, 7, 3, 1, true), false, 3, 111},
		{"a new incarnation's", batch(back.Add(4*time.Second), back.Add(3*time.Second), 9, 1, 1000, true), false, 1, 1111},
		{"a new incarnation's first batch, cut a day ago", batch(back.Add(5*time.Second), cut, 11, 1, 5000, true), true, 1, 1111},
		{"the same, from a leader that does not refuse stale batches", batch(back.Add(6*time.Second), cut, 13, 1, 5000, false), false, 1, 6111},
		{"a batch without a cut, which cannot be told from a new incarnation's", uncut(batch(back.Add(7*time.Second), cut, 15, 1, 1, true)), false, 1, 6112},
	} {
		res := apply(step.cmd)
		if stale := slices.Contains(res.GetStale(), 0); stale != step.stale || res.GetAckedSeq()[0] != step.acked {
			t.Errorf("step %d, %s: stale %v, acked %d; want %v, %d", i, step.name, stale, res.GetAckedSeq()[0], step.stale, step.acked)
		}
		if a, _ := ledgerTotal(f, "acme"); a != step.admitted {
			t.Fatalf("step %d, %s: acme has %d admitted in the ledger, want %d", i, step.name, a, step.admitted)
		}
	}
	// Replicas agree through a snapshot: the refused batch's record is
	// kept as any other.
	if got, want := dumpState(roundTrip(t, f).st), dumpState(f.st); got != want {
		t.Fatalf("restored:\n%s\nwant:\n%s", got, want)
	}
}
