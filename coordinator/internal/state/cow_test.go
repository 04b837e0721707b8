package state

import (
	"bytes"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/proto"
)

// TestSnapshotSeesNothingAppliedAfterIt: a snapshot is the state at the
// moment it was taken, whatever is applied while it is written. Two
// snapshots are taken together; one is written at once, the other after
// every kind of change the state knows (new and existing ledger lines,
// grants summed into a line, windows made final and dropped past
// retention, agent runs updated and forgotten, members replaced and
// removed): their bytes are equal. The trees share their nodes with the
// snapshot's clone, so a change made in place would show.
func TestSnapshotSeesNothingAppliedAfterIt(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	f.Apply(entry(t, 2, CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: "n1", RaftAddress: "127.0.0.1:1"}}))
	f.Apply(entry(t, 3, CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: "n2", RaftAddress: "127.0.0.1:2"}}))
	// Enough lines for trees of several levels (degree 32).
	for i := range uint64(5000) {
		f.Apply(entry(t, 4, CmdReports, usageCmd(hour0.Add(time.Duration(i%120)*time.Minute), "gw-"+string(rune('a'+i%9)), 1, i/9+1, "t"+string(rune('a'+i%26))+string(rune('a'+i/26%26)), i%50+1, i%3)))
	}
	f.Apply(entry(t, 5, CmdGrants|Ignorable, &fsmpb.GrantsCommand{Epoch: 1, Seq: 1, Region: "eu-west", Grants: []*fsmpb.GrantRecord{
		{Tenant: "taa", Rule: "plan-quota", WindowUnix: hour0.Unix(), Granted: 100}}}))

	now, later := f.st.Snapshot(), f.st.Snapshot()
	var want bytes.Buffer
	if err := now.Write(&want); err != nil {
		t.Fatal(err)
	}

	changes := []struct {
		name string
		cmd  Command
		msg  proto.Message
	}{
		{"usage on existing lines and runs", CmdReports, usageCmd(hour0.Add(30*time.Minute), "gw-a", 1, 10_000, "taa", 9, 9)},
		{"a new line and a new run", CmdReports, usageCmd(hour0.Add(150*time.Minute), "gw-new", 1, 1, "brand-new", 1, 0)},
		{"grants summed into a line", CmdGrants | Ignorable, &fsmpb.GrantsCommand{Epoch: 1, Seq: 2, Region: "eu-west", Grants: []*fsmpb.GrantRecord{
			{Tenant: "taa", Rule: "plan-quota", WindowUnix: hour0.Unix(), Granted: 5}}}},
		{"a member replaced", CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: "n1", RaftAddress: "127.0.0.1:9"}}},
		{"a member removed", CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: "n2"}, Remove: true}},
		{"windows final", CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: hour0.Add(2 * time.Hour).UnixNano(), AgentTimeoutNano: int64(time.Minute)}},
		{"lines past retention dropped, runs forgotten", CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: hour0.Add(72 * time.Hour).UnixNano(), AgentTimeoutNano: int64(time.Minute), RetentionNano: int64(time.Hour)}},
	}
	for _, c := range changes {
		f.Apply(entry(t, 6, c.cmd, c.msg))
	}
	var got bytes.Buffer
	if err := later.Write(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("the snapshot written after the changes differs from the one written before them (%d vs %d bytes)", got.Len(), want.Len())
	}
	var lines int
	f.read(func(s *State) { lines = s.LedgerLen() })
	if lines != 0 {
		t.Fatalf("%d lines left after retention: the changes did not run", lines)
	}
}
