package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/ledger"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

func testFSM() *FSM { return New(hclog.NewNullLogger(), nil) }

// entry makes a log entry the way the leader would.
func entry(t testing.TB, index uint64, ct state.Command, m proto.Message) *raft.Log {
	t.Helper()
	data, err := state.Encode(ct, m)
	if err != nil {
		t.Fatal(err)
	}
	return rawEntry(index, data)
}

func rawEntry(index uint64, data []byte) *raft.Log {
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: data}
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	cancelled, closed bool
}

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { m.cancelled = true; return nil }
func (m *memSink) Close() error  { m.closed = true; return nil }

// persist snapshots f and returns the snapshot's bytes.
func persist(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("a snapshot persisted without error left its sink closed %v, cancelled %v", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

// dump renders a state deterministically, one line for each member, agent
// run, ledger line, open and final window, after a header line.
func dump(s *state.State) string {
	set := s.Settings()
	ge, gs := s.Grants()
	var names []string
	for _, r := range s.Rules().Rules() {
		names = append(names, r.Name)
	}
	header := fmt.Sprintf("epoch %d window %d interval %d ttl %d grants %d/%d cluster %s rules v%d %v\n",
		s.Epoch(), set.BillingWindow, set.ReportInterval, set.LeaseTTL, ge, gs, s.ClusterID(), s.Rules().Version(), names)
	var lines []string
	for _, m := range s.Members() {
		lines = append(lines, fmt.Sprintf("member %s %s", m.GetId(), strings.Join(strings.Fields(m.String()), " ")))
	}
	for _, r := range s.Runs() {
		line := fmt.Sprintf("inc %s/%d %d %d %d", r.Node, r.Incarnation, r.LastSeq, r.LastApplied, r.LastCut)
		if r.Left {
			line += " left"
		}
		lines = append(lines, line)
	}
	s.Ledger(func(l ledger.Line) bool {
		k := l.Key
		line := fmt.Sprintf("ledger %s/%s/%s/%d %d %d", k.Tenant, k.Rule, k.Region, k.Window, l.Admitted, l.Denied)
		if l.Granted != nil {
			line += fmt.Sprintf(" granted %g", *l.Granted)
		}
		lines = append(lines, line)
		return true
	})
	for _, w := range s.OpenWindows() {
		rs := []string{}
		for _, r := range w.Reporters {
			rs = append(rs, fmt.Sprintf("%s/%d", r.Node, r.Incarnation))
		}
		lines = append(lines, fmt.Sprintf("open %d %v", w.Start, rs))
	}
	for _, w := range s.FinalWindows() {
		lines = append(lines, fmt.Sprintf("final %d", w))
	}
	slices.Sort(lines)
	return header + strings.Join(lines, "\n") + "\n"
}
