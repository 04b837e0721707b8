package state

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"google.golang.org/protobuf/proto"
)

// machine applies log entries to a state as the FSM does (decoded from
// their bytes, the ignorable bit honoured), without Raft.
type machine struct{ st *State }

func testFSM() *machine { return &machine{st: New()} }

func (m *machine) read(fn func(*State)) { fn(m.st) }

// Restore replaces the state with one read from a snapshot.
func (m *machine) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := ReadSnapshot(rc)
	if err != nil {
		return err
	}
	m.st = st
	return nil
}

// Apply decodes and applies one entry's data; it fails on what the FSM
// would stop on.
func (m *machine) Apply(data []byte) any {
	t := Command(data[0])
	msg, ok := Message(t)
	if !ok {
		if t&Ignorable != 0 {
			return nil
		}
		panic(fmt.Sprintf("unknown command type %d", t))
	}
	if err := proto.Unmarshal(data[1:], msg); err != nil {
		panic(err)
	}
	return m.st.Apply(t, msg)
}

// entry encodes a command the way the leader would.
func entry(t testing.TB, _ uint64, ct Command, m proto.Message) []byte {
	t.Helper()
	data, err := Encode(ct, m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

var hour0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func usageCmd(at time.Time, node string, inc, seq uint64, tenant string, admitted, denied uint64) *fsmpb.ReportsCommand {
	return &fsmpb.ReportsCommand{ProposedUnixNano: at.UnixNano(), Reports: []*fsmpb.AgentUsage{{
		Node: node, Incarnation: inc, Region: "eu-west",
		Batch: &allotpb.UsageBatch{Seq: seq, CutUnixNano: at.UnixNano(), Counts: []*allotpb.UsageCount{
			{Rule: "plan-quota", Tenant: tenant, WindowUnix: at.Unix(), Admitted: admitted, Denied: denied},
		}},
	}}}
}

func ledgerTotal(f *machine, tenant string) (admitted, denied uint64) {
	f.read(func(s *State) {
		s.eachLine(func(k ledger.Key, u usage) {
			if k.Tenant == tenant {
				admitted += u.admitted
				denied += u.denied
			}
		})
	})
	return admitted, denied
}

// roundTrip snapshots f and restores the snapshot into a new machine.
func roundTrip(t *testing.T, f *machine) *machine {
	t.Helper()
	var buf bytes.Buffer
	if err := f.st.Snapshot().Write(&buf); err != nil {
		t.Fatal(err)
	}
	st, err := ReadSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return &machine{st: st}
}

// dumpState renders a state deterministically, for comparing replicas.
func dumpState(s *State) string {
	var lines []string
	lines = append(lines, fmt.Sprintf("epoch %d window %d interval %d ttl %d grants %d/%d export %+v dropped %d rules %s", s.epoch, s.billingWindow, s.reportInterval, s.leaseTTL, s.grantEpoch, s.grantSeq, s.export, s.retentionDropped, rulespb.SetToProto(s.rules)))
	s.eachMember(func(m *allotpb.Member) { lines = append(lines, fmt.Sprintf("member %s %s", m.GetId(), m)) })
	s.eachRun(func(k incKey, inc incarnation) {
		lines = append(lines, fmt.Sprintf("inc %s/%d %d %d %d", k.node, k.incarnation, inc.lastSeq, inc.lastApplied, inc.lastCut))
	})
	lines = append(lines, dumpLedger(s)...)
	s.eachOpen(func(w int64, reporters []incKey) {
		rs := make([]string, len(reporters))
		for i, k := range reporters {
			rs[i] = fmt.Sprintf("%s/%d", k.node, k.incarnation)
		}
		lines = append(lines, fmt.Sprintf("open %d %v", w, rs))
	})
	for _, w := range s.finalWindows() {
		lines = append(lines, fmt.Sprintf("final %d", w))
	}
	if s.ov.version != 0 {
		lines = append(lines, fmt.Sprintf("overrides v%d floor %d mirror %v", s.ov.version, s.ov.floor, s.ov.mirror))
	}
	s.eachOverride(func(o *allotpb.Override) { lines = append(lines, fmt.Sprintf("override %v", o)) })
	if s.audit.seq != 0 {
		lines = append(lines, fmt.Sprintf("audit seq %d", s.audit.seq))
	}
	s.eachAudit(func(e *allotpb.AuditEntry) { lines = append(lines, fmt.Sprintf("audit %v", e)) })
	if s.resets.version != 0 {
		lines = append(lines, fmt.Sprintf("resets v%d floor %d mirror %v", s.resets.version, s.resets.floor, s.resets.mirror))
	}
	s.eachReset(func(r *allotpb.Reset) { lines = append(lines, fmt.Sprintf("reset %v", r)) })
	s.eachTally(func(r *fsmpb.TallyRecord) { lines = append(lines, fmt.Sprintf("tally %v", r)) })
	s.EachNotice(false, func(n *allotpb.Notice) bool { lines = append(lines, fmt.Sprintf("notice %v", n)); return true })

	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func dumpLedger(s *State) []string {
	var lines []string
	s.eachLine(func(k ledger.Key, u usage) {
		line := fmt.Sprintf("ledger %s/%s/%s/%d %d %d", k.Tenant, k.Rule, k.Region, k.Window, u.admitted, u.denied)
		if u.granted != nil {
			line += fmt.Sprintf(" granted %g", *u.granted)
		}
		if u.terms != (ledger.Terms{}) {
			line += fmt.Sprintf(" cycle %d limit %d", u.terms.CycleStart, u.terms.Limit)
		}
		if u.overage != 0 {
			line += fmt.Sprintf(" overage %d", u.overage)
		}
		lines = append(lines, line)
	})
	slices.Sort(lines)
	return lines
}
