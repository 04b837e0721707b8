package state

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// snapshotBytes writes s's snapshot.
func snapshotBytes(t testing.TB, s *State) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.Snapshot().Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// commutingCommands are commands whose order does not change the state
// they make: reports of different agent runs and windows, members, rules
// put one at a time, all before maintenance (applied last).
func commutingCommands(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	for i := range 40 {
		at := hour0.Add(time.Duration(i%9) * 25 * time.Minute)
		cmd := usageCmd(at, "gw-"+string(rune('a'+i%6)), uint64(1+i/6), 1, "t"+string(rune('a'+i%5)), uint64(i), uint64(i%3))
		cmd.Reports[0].Region = []string{"eu-west", "us-east"}[i%2]
		out = append(out, entry(t, 0, CmdReports, cmd))
	}
	for _, id := range []string{"n3", "n1", "n2"} {
		out = append(out, entry(t, 0, CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: id, RaftAddress: id + ":1", GrpcAddress: id + ":2"}}))
	}
	for _, name := range []string{"zeta", "alpha", "mid", "beta"} {
		out = append(out, entry(t, 0, CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{{Name: name, Scope: "tenant", Algorithm: "gcra", Limit: 10, Period: durationpb.New(time.Second), Intent: "quota"}}}))
	}
	return out
}

// build applies settings, then cmds in the given order, then the same
// maintenance and grants.
func build(t testing.TB, cmds [][]byte) *State {
	t.Helper()
	f := testFSM()
	f.Apply(entry(t, 0, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour), ReportIntervalNano: int64(time.Second), LeaseTtlNano: int64(5 * time.Second), ClusterId: "c1"}))
	f.Apply(entry(t, 0, CmdEpoch, &fsmpb.EpochCommand{Leader: "n1"}))
	for _, c := range cmds {
		if err, ok := f.Apply(c).(error); ok {
			t.Fatal(err)
		}
	}
	f.Apply(entry(t, 0, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: hour0.Add(3 * time.Hour).UnixNano(), AgentTimeoutNano: int64(time.Minute)}))
	f.Apply(entry(t, 0, CmdGrants|Ignorable, &fsmpb.GrantsCommand{Epoch: 1, Seq: 1, Region: "eu-west", Grants: []*fsmpb.GrantRecord{
		{Tenant: "ta", Rule: "zeta", WindowUnix: hour0.Add(3 * time.Hour).Unix(), Granted: 12.5}}}))
	return f.st
}

// TestSnapshotBytes: equal states write identical snapshots, whatever
// order the commands that built them came in (every section is in a
// defined order, the rules included), and a snapshot restored and written
// again is the same bytes.
func TestSnapshotBytes(t *testing.T) {
	cmds := commutingCommands(t)
	want := snapshotBytes(t, build(t, cmds))
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 5 {
		shuffled := append([][]byte(nil), cmds...)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		s := build(t, shuffled)
		if got := snapshotBytes(t, s); !bytes.Equal(got, want) {
			t.Fatalf("order %d: the same commands in another order write another snapshot (%d bytes, want %d)", i, len(got), len(want))
		}
		if dumpState(s) != dumpState(build(t, cmds)) {
			t.Fatal("the commands do not commute: the test proves nothing")
		}
	}
	restored, err := ReadSnapshot(bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshotBytes(t, restored); !bytes.Equal(got, want) {
		t.Fatalf("snapshot → restore → snapshot changed the bytes (%d, want %d)", len(got), len(want))
	}
	if dumpState(restored) != dumpState(build(t, cmds)) {
		t.Fatal("the restored state differs")
	}
}

// TestSnapshotGolden: this version writes the state of the previous
// version's fixture (../fsm/testdata/v1) as testdata/v2.snap, byte for byte:
// a change to the format shows here first. ALLOT_WRITE_GOLDEN=1 rewrites
// the file after a deliberate change.
func TestSnapshotGolden(t *testing.T) {
	raw, err := os.ReadFile("../fsm/testdata/v1/snapshot.snap")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadSnapshot(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	got := snapshotBytes(t, s)
	if os.Getenv("ALLOT_WRITE_GOLDEN") != "" {
		if err := os.WriteFile("testdata/v2.snap", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/v2.snap")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the v1 fixture's state writes %d bytes that differ from testdata/v2.snap (%d bytes)", len(got), len(want))
	}
	again, err := ReadSnapshot(bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	if dumpState(again) != dumpState(s) {
		t.Fatal("testdata/v2.snap restores to another state")
	}
	h, err := ReadHeader(bytes.NewReader(want))
	if err != nil || h.GetFormat() != 2 || h.GetClusterId() != s.clusterID {
		t.Fatalf("header %v, %v", h, err)
	}
}

// appendRecord appends one format 2 record.
func appendRecord(b []byte, t record, m proto.Message) []byte {
	payload, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	b = append(b, byte(t))
	b = protowire.AppendVarint(b, uint64(len(payload)))
	return append(b, payload...)
}

// TestSnapshotRecords: a reader skips a record type it does not know that
// has the ignorable bit, and refuses any other unknown type, a snapshot
// cut short anywhere, a wrong end count, bytes after the end, a second
// header and a second line for one ledger key, each with an error that
// says so.
func TestSnapshotRecords(t *testing.T) {
	header := &fsmpb.SnapshotHeader{Format: 2, Epoch: 4, ClusterId: "c1"}
	line := &fsmpb.LedgerRecord{Tenant: "acme", Rule: "r", Region: "eu", WindowUnix: 3600, Admitted: 5}
	end := func(n uint64) *fsmpb.SnapshotEnd { return &fsmpb.SnapshotEnd{Records: n} }
	var base []byte
	base = appendRecord(base, recHeader, header)
	base = appendRecord(base, recLedger, line)
	for _, tc := range []struct {
		name string
		data []byte
		want string // "" for a snapshot that reads
	}{
		{"whole", appendRecord(base, recEnd, end(2)), ""},
		{"an ignorable unknown record", appendRecord(appendRecord(base, recIgnorable|0x55, &fsmpb.SnapshotEnd{Records: 99}), recEnd, end(3)), ""},
		{"an unknown record", appendRecord(appendRecord(base, 0x55, &fsmpb.SnapshotEnd{}), recEnd, end(3)), "unknown record type 85: this version is older than the snapshot"},
		{"no end", base, "without its end record: it was cut short"},
		{"a wrong count", appendRecord(base, recEnd, end(5)), "counts 5 records before it; there were 2"},
		{"bytes after the end", append(appendRecord(base, recEnd, end(2)), 0), "bytes after the end record"},
		{"a second header", appendRecord(appendRecord(base, recHeader, header), recEnd, end(3)), "snapshot record 3: a second header"},
		{"a second line", appendRecord(appendRecord(base, recLedger, line), recEnd, end(3)), "snapshot record 3: a second line for acme/r/eu/3600"},
		{"a newer format", appendRecord(nil, recHeader, &fsmpb.SnapshotHeader{Format: 3}), "snapshot format 3, this version reads 1 and 2"},
		{"empty", nil, "an empty snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ReadSnapshot(bytes.NewReader(tc.data))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if s.Epoch() != 4 || s.LedgerLen() != 1 || s.ClusterID() != "c1" {
					t.Fatalf("read epoch %d, %d lines, cluster %q", s.Epoch(), s.LedgerLen(), s.ClusterID())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one saying %q", err, tc.want)
			}
		})
	}
	// Cut anywhere, a snapshot never reads as a smaller state.
	whole := snapshotBytes(t, build(t, commutingCommands(t)))
	for n := 0; n < len(whole); n++ {
		if _, err := ReadSnapshot(bytes.NewReader(whole[:n])); err == nil {
			t.Fatalf("the first %d of %d bytes read as a snapshot", n, len(whole))
		} else if n > 0 && !errors.Is(err, ErrSnapshotFormat) && !strings.Contains(err.Error(), "unexpected EOF") {
			t.Fatalf("cut at %d: %v", n, err)
		}
	}
}
