package coordinator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

func testFSM() *fsm.FSM { return fsm.New(hclog.NewNullLogger(), nil) }

// entry makes a log entry the way the leader would.
func entry(t testing.TB, index uint64, ct state.Command, m proto.Message) *raft.Log {
	t.Helper()
	data, err := state.Encode(ct, m)
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: data}
}

var hour0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func ledgerTotal(f *fsm.FSM, tenant string) (admitted, denied uint64) {
	f.Read(func(s *state.State) {
		s.Ledger(func(l ledger.Line) bool {
			if l.Key.Tenant == tenant {
				admitted += l.Admitted
				denied += l.Denied
			}
			return true
		})
	})
	return admitted, denied
}

// dumpState renders a state deterministically, for comparing replicas.
func dumpState(s *state.State) string {
	set := s.Settings()
	ge, gs := s.Grants()
	lines := []string{fmt.Sprintf("epoch %d window %d interval %d ttl %d grants %d/%d rules %s", s.Epoch(), set.BillingWindow, set.ReportInterval, set.LeaseTTL, ge, gs, rulespb.SetToProto(s.Rules()))}
	for _, m := range s.Members() {
		lines = append(lines, fmt.Sprintf("member %s %s", m.GetId(), m))
	}
	for _, r := range s.Runs() {
		line := fmt.Sprintf("inc %s/%d %d %d %d", r.Node, r.Incarnation, r.LastSeq, r.LastApplied, r.LastCut)
		if r.Left {
			line += " left"
		}
		lines = append(lines, line)
	}
	lines = append(lines, dumpLedger(s)...)
	for _, w := range s.OpenWindows() {
		var rs []string
		for _, r := range w.Reporters {
			rs = append(rs, fmt.Sprintf("%s/%d", r.Node, r.Incarnation))
		}
		lines = append(lines, fmt.Sprintf("open %d %v", w.Start, rs))
	}
	for _, w := range s.FinalWindows() {
		lines = append(lines, fmt.Sprintf("final %d", w))
	}
	return strings.Join(lines, "\n")
}

func dumpLedger(s *state.State) []string {
	var lines []string
	s.Ledger(func(l ledger.Line) bool {
		k := l.Key
		line := fmt.Sprintf("ledger %s/%s/%s/%d %d %d", k.Tenant, k.Rule, k.Region, k.Window, l.Admitted, l.Denied)
		if l.Granted != nil {
			line += fmt.Sprintf(" granted %g", *l.Granted)
		}
		lines = append(lines, line)
		return true
	})
	slices.Sort(lines)
	return lines
}

// fillLedger applies n ledger lines in one region, one tenant per line,
// spread over windows, through the FSM.
func fillLedger(t testing.TB, f *fsm.FSM, index uint64, n int, region string, at time.Time) {
	cmd := &fsmpb.ReportsCommand{ProposedUnixNano: at.UnixNano()}
	for i := 0; i < n; {
		b := &allotpb.UsageBatch{Seq: 1, CutUnixNano: at.UnixNano()}
		for ; i < n && len(b.Counts) < 10000; i++ {
			b.Counts = append(b.Counts, &allotpb.UsageCount{Rule: "plan-quota", Tenant: fmt.Sprintf("tenant-%07d", i), WindowUnix: at.Unix(), Admitted: uint64(i + 1)})
		}
		cmd.Reports = append(cmd.Reports, &fsmpb.AgentUsage{Node: fmt.Sprintf("gw-%s-%d-%d", region, at.Unix(), i), Incarnation: 1, Region: region, Batch: b})
	}
	f.Apply(entry(t, index, state.CmdReports, cmd))
}
