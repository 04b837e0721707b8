package state

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func stamp(at time.Time, actor, action string) *fsmpb.Audit {
	return &fsmpb.Audit{AtUnixNano: at.UnixNano(), Actor: actor, Peer: "192.0.2.7:5000", Action: action}
}

func quotaRule(name string, limit int64) *allotpb.Rule {
	return &allotpb.Rule{Name: name, Scope: "tenant", Algorithm: "gcra", Limit: limit, Period: durationpb.New(time.Second), Intent: "quota"}
}

// TestAuditRecordsChanges: a rules, an overrides and a member command
// carrying a stamp each record one entry, with what changed before and
// after; a refused command records nothing; a command without a stamp
// (a mirror, an older leader's) records nothing either.
func TestAuditRecordsChanges(t *testing.T) {
	f := testFSM()
	apply := func(ct Command, cmd proto.Message) any {
		t.Helper()
		return f.Apply(entry(t, 0, ct, cmd))
	}
	apply(CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{quotaRule("plan-quota", 100), quotaRule("other", 5)}, Audit: stamp(hour0, "alice", "PutRules")})
	apply(CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{quotaRule("plan-quota", 200), quotaRule("other", 5)}, Audit: stamp(hour0.Add(time.Minute), "bob", "PutRules")})
	// Refused: an invalid rule changes nothing and is not recorded.
	if _, ok := apply(CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{{Name: "bad"}}, Audit: stamp(hour0, "mallory", "PutRules")}).(error); !ok {
		t.Fatal("an invalid rule was applied")
	}
	apply(CmdOverrides, &fsmpb.OverridesCommand{Put: []*allotpb.Override{{Rule: "plan-quota", Tenant: "acme", Limit: 500}}, NowUnixNano: hour0.UnixNano(), Audit: stamp(hour0.Add(2*time.Minute), "alice", "PutOverrides")})
	apply(CmdOverrides, &fsmpb.OverridesCommand{Delete: []*allotpb.OverrideKey{{Rule: "plan-quota", Tenant: "acme"}}, NowUnixNano: hour0.UnixNano(), Audit: stamp(hour0.Add(3*time.Minute), "alice", "DeleteOverrides")})
	if _, ok := apply(CmdOverrides, &fsmpb.OverridesCommand{Delete: []*allotpb.OverrideKey{{Rule: "plan-quota", Tenant: "acme"}}, NowUnixNano: hour0.UnixNano(), Audit: stamp(hour0, "mallory", "DeleteOverrides")}).(error); !ok {
		t.Fatal("a delete of a missing override was applied")
	}
	apply(CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: "n2", RaftAddress: "n2:1", GrpcAddress: "n2:2"}, Audit: stamp(hour0.Add(4*time.Minute), "n2", "Join")})
	apply(CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: "n2"}, Remove: true, Audit: stamp(hour0.Add(5*time.Minute), "alice", "Remove")})
	apply(CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{quotaRule("plan-quota", 1)}, Version: 9}) // a mirror: no stamp
	apply(CmdAudit|Ignorable, &fsmpb.AuditCommand{Audit: stamp(hour0.Add(6*time.Minute), "carol", "ResetUsage"), Kind: AuditReset, Subjects: []string{"plan-quota/acme"}, After: &allotpb.AuditValues{Json: `{"cleared":3}`}})

	got, _, more := f.st.AuditPage(AuditQuery{}, 0, 100, 1000)
	if more || len(got) != 7 {
		t.Fatalf("%d entries (more %v), want 7: %v", len(got), more, got)
	}
	want := []struct {
		actor, kind, action, subjects string
	}{
		{"carol", AuditReset, "ResetUsage", "[plan-quota/acme]"},
		{"alice", AuditMembership, "Remove", "[n2]"},
		{"n2", AuditMembership, "Join", "[n2]"},
		{"alice", AuditOverrides, "DeleteOverrides", "[plan-quota/acme]"},
		{"alice", AuditOverrides, "PutOverrides", "[plan-quota/acme]"},
		{"bob", AuditRules, "PutRules", "[other plan-quota]"},
		{"alice", AuditRules, "PutRules", "[other plan-quota]"},
	}
	for i, w := range want {
		e := got[i]
		if e.GetSeq() != uint64(7-i) || e.GetActor() != w.actor || e.GetKind() != w.kind || e.GetAction() != w.action || fmt.Sprint(e.GetSubjects()) != w.subjects || e.GetPeer() != "192.0.2.7:5000" {
			t.Errorf("entry %d: %v, want %+v", i, e, w)
		}
	}
	// bob changed one rule of the two he put: before 100, after 200.
	bob := got[5]
	if bob.GetChanged() != 1 || len(bob.GetBefore().GetRules()) != 1 || bob.GetBefore().GetRules()[0].GetLimit() != 100 || bob.GetAfter().GetRules()[0].GetLimit() != 200 {
		t.Errorf("bob's change: %v", bob)
	}
	if bob.GetUnixNano() != hour0.Add(time.Minute).UnixNano() {
		t.Errorf("bob's time %d, want the stamp's", bob.GetUnixNano())
	}
	if alice := got[6]; len(alice.GetBefore().GetRules()) != 0 || len(alice.GetAfter().GetRules()) != 2 || alice.GetChanged() != 2 {
		t.Errorf("alice's first put: %v", alice)
	}
	if del := got[3]; len(del.GetBefore().GetOverrides()) != 1 || del.GetBefore().GetOverrides()[0].GetLimit() != 500 || len(del.GetAfter().GetOverrides()) != 0 {
		t.Errorf("the delete: %v", del)
	}
	if put := got[4]; len(put.GetBefore().GetOverrides()) != 0 || put.GetAfter().GetOverrides()[0].GetLimit() != 500 {
		t.Errorf("the put: %v", put)
	}
	if rm := got[1]; rm.GetBefore().GetMembers()[0].GetGrpcAddress() != "n2:2" || len(rm.GetAfter().GetMembers()) != 0 {
		t.Errorf("the remove: %v", rm)
	}

	// Filters, and pages newest first.
	for _, c := range []struct {
		q    AuditQuery
		want int
	}{
		{AuditQuery{Actor: "alice"}, 4},
		{AuditQuery{Kind: AuditOverrides}, 2},
		{AuditQuery{Subject: "acme"}, 3}, // the tenant of overrides' and the reset's subjects
		{AuditQuery{Subject: "other"}, 2},
		{AuditQuery{From: hour0.Add(time.Minute).UnixNano(), To: hour0.Add(3 * time.Minute).UnixNano()}, 2},
	} {
		if got, _, _ := f.st.AuditPage(c.q, 0, 100, 1000); len(got) != c.want {
			t.Errorf("%+v: %d entries, want %d", c.q, len(got), c.want)
		}
	}
	var seqs []uint64
	for before := uint64(0); ; {
		page, next, more := f.st.AuditPage(AuditQuery{}, before, 3, 1000)
		for _, e := range page {
			seqs = append(seqs, e.GetSeq())
		}
		if !more {
			break
		}
		before = next
	}
	if fmt.Sprint(seqs) != "[7 6 5 4 3 2 1]" {
		t.Errorf("paged: %v", seqs)
	}
}

// TestAuditSnapshotRoundTrip: the log, and the seq past entries dropped,
// survive a snapshot; the state read back writes the same bytes.
func TestAuditSnapshotRoundTrip(t *testing.T) {
	f := testFSM()
	for i := range 5 {
		f.Apply(entry(t, 0, CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{quotaRule("r", int64(i+1))}, Audit: &fsmpb.Audit{AtUnixNano: hour0.Add(time.Duration(i) * time.Minute).UnixNano(), Actor: "alice", Action: "PutRules", MaxEntries: 3}}))
	}
	back := roundTrip(t, f)
	if got, want := dumpState(back.st), dumpState(f.st); got != want {
		t.Fatalf("restored:\n%s\nwant:\n%s", got, want)
	}
	if lo, hi := back.st.AuditBounds(); lo != 3 || hi != 5 {
		t.Fatalf("bounds %d..%d, want 3..5", lo, hi)
	}
	if string(snapshotBytes(t, back.st)) != string(snapshotBytes(t, f.st)) {
		t.Fatal("the restored state writes other bytes")
	}
	// The next entry after a restore takes the next seq, not a reused one.
	back.Apply(entry(t, 0, CmdRules, &fsmpb.RulesCommand{Delete: []string{"r"}, Audit: stamp(hour0, "bob", "DeleteRule")}))
	if _, hi := back.st.AuditBounds(); hi != 6 {
		t.Fatalf("after a restore the next entry is %d, want 6", hi)
	}
}

// TestAuditBound: each entry keeps the log within its stamp's bound, and
// maintenance drops entries past the age and count it is given.
func TestAuditBound(t *testing.T) {
	f := testFSM()
	for i := range 10 {
		f.Apply(entry(t, 0, CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: fmt.Sprint("n", i)}, Audit: &fsmpb.Audit{AtUnixNano: hour0.Add(time.Duration(i) * time.Hour).UnixNano(), Actor: "a", MaxEntries: 8}}))
	}
	if n := f.st.AuditLen(); n != 8 {
		t.Fatalf("%d entries, want the 8 the stamps bound it to", n)
	}
	// Entries from hour0+2h to +9h are kept; a day's retention at
	// hour0+1d+5h keeps those from +5h on, and a bound of 3 the newest 3.
	f.Apply(entry(t, 0, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: hour0.Add(29 * time.Hour).UnixNano(), AgentTimeoutNano: int64(time.Minute), AuditRetentionNano: int64(24 * time.Hour)}))
	if lo, hi := f.st.AuditBounds(); lo != 6 || hi != 10 {
		t.Fatalf("after the age: %d..%d, want 6..10", lo, hi)
	}
	f.Apply(entry(t, 0, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: hour0.Add(29 * time.Hour).UnixNano(), AgentTimeoutNano: int64(time.Minute), AuditMaxEntries: 3}))
	if lo, hi := f.st.AuditBounds(); lo != 8 || hi != 10 {
		t.Fatalf("after the count: %d..%d, want 8..10", lo, hi)
	}
	// A big change is one entry of at most MaxAuditItems items, counted.
	var os []*allotpb.Override
	f.Apply(entry(t, 0, CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{quotaRule("plan-quota", 10)}}))
	for i := range 120 {
		os = append(os, &allotpb.Override{Rule: "plan-quota", Tenant: fmt.Sprint("t", i), Limit: 5})
	}
	f.Apply(entry(t, 0, CmdOverrides, &fsmpb.OverridesCommand{Put: os, NowUnixNano: hour0.UnixNano(), Audit: stamp(hour0, "importer", "PutOverrides")}))
	page, _, _ := f.st.AuditPage(AuditQuery{Kind: AuditOverrides}, 0, 1, 100)
	if e := page[0]; e.GetChanged() != 120 || !e.GetTruncated() || len(e.GetSubjects()) != MaxAuditItems || len(e.GetAfter().GetOverrides()) != MaxAuditItems {
		t.Fatalf("the import's entry: changed %d truncated %v, %d subjects, %d after", e.GetChanged(), e.GetTruncated(), len(e.GetSubjects()), len(e.GetAfter().GetOverrides()))
	}
}
