package state

import (
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestStateCountsEachBatchOnce: a batch retried after a timeout or failover
// (same node, incarnation and seq) is applied once; a new incarnation of
// the same node starts its own sequence.
func TestStateCountsEachBatchOnce(t *testing.T) {
	f := testFSM()
	res := f.Apply(entry(t, 1, CmdReports, usageCmd(hour0, "gw-1", 7, 1, "acme", 100, 5))).(*fsmpb.ReportsResult)
	if res.GetAckedSeq()[0] != 1 {
		t.Fatalf("acked %v", res.GetAckedSeq())
	}
	f.Apply(entry(t, 2, CmdReports, usageCmd(hour0, "gw-1", 7, 1, "acme", 100, 5))) // the retry
	f.Apply(entry(t, 3, CmdReports, usageCmd(hour0, "gw-1", 7, 2, "acme", 10, 0)))
	f.Apply(entry(t, 4, CmdReports, usageCmd(hour0, "gw-1", 8, 1, "acme", 1, 0))) // restarted agent
	if a, d := ledgerTotal(f, "acme"); a != 111 || d != 5 {
		t.Fatalf("ledger %d admitted %d denied; want 111 and 5", a, d)
	}
}

func TestStateBillingWindowsAndFinality(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	at := hour0.Add(10 * time.Minute)
	f.Apply(entry(t, 2, CmdReports, usageCmd(at, "gw-1", 1, 1, "acme", 5, 0)))
	f.Apply(entry(t, 3, CmdReports, usageCmd(at, "gw-2", 1, 1, "acme", 7, 0)))
	maintain := func(now time.Time) {
		f.Apply(entry(t, 9, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: now.UnixNano(), AgentTimeoutNano: int64(2 * time.Hour)}))
	}
	final := func() (v bool) {
		f.read(func(s *State) { v = s.final.Has(hour0.Unix()) })
		return v
	}
	maintain(hour0.Add(30 * time.Minute))
	if final() {
		t.Fatal("an open window was finalized")
	}
	// The window has closed; gw-1 has reported past its end, gw-2 not yet.
	f.Apply(entry(t, 4, CmdReports, usageCmd(hour0.Add(61*time.Minute), "gw-1", 1, 2, "acme", 1, 0)))
	maintain(hour0.Add(62 * time.Minute))
	if final() {
		t.Fatal("window finalized while gw-2 had not reported past its end")
	}
	f.Apply(entry(t, 5, CmdReports, usageCmd(hour0.Add(62*time.Minute), "gw-2", 1, 2, "acme", 1, 0)))
	maintain(hour0.Add(63 * time.Minute))
	if !final() {
		t.Fatal("window not finalized once every reporter was acknowledged past its end")
	}
	// A late count for the final window is carried into the open one.
	late := usageCmd(hour0.Add(64*time.Minute), "gw-3", 1, 1, "acme", 3, 0)
	late.Reports[0].Batch.Counts[0].WindowUnix = hour0.Unix()
	f.Apply(entry(t, 6, CmdReports, late))
	f.read(func(s *State) {
		if l, _ := s.ledger.Get(lineItem{key: ledger.Key{Window: hour0.Unix(), Tenant: "acme", Rule: "plan-quota", Region: "eu-west"}}); l.u.admitted != 12 {
			t.Errorf("final window changed: %d admitted", l.u.admitted)
		}
		if l, ok := s.ledger.Get(lineItem{key: ledger.Key{Window: hour0.Add(time.Hour).Unix(), Tenant: "acme", Rule: "plan-quota", Region: "eu-west"}}); !ok || l.u.admitted != 5 {
			t.Errorf("late usage not carried into the open window: %+v", l)
		}
	})
}

// TestCleanShutdownReleasesWindows: an agent that shuts down cleanly
// sends its last batch (UsageBatch.last), and the windows it reported in
// become final once they end, not the agent timeout later; a snapshot
// keeps that it left. An agent that stops without one is waited for.
func TestCleanShutdownReleasesWindows(t *testing.T) {
	const timeout = 15 * time.Minute
	tests := []struct {
		name  string
		last  bool
		final bool // at 62 minutes: the window ended 2 minutes before
	}{
		{"last batch applied", true, true},
		{"stopped without one", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testFSM()
			f.Apply(entry(t, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
			f.Apply(entry(t, 2, CmdReports, usageCmd(hour0.Add(10*time.Minute), "gw-1", 1, 1, "acme", 5, 0)))
			// gw-1 stops at 56:47, its usage acknowledged; its last
			// report holds nothing more.
			stop := hour0.Add(56*time.Minute + 47*time.Second)
			last := &fsmpb.ReportsCommand{ProposedUnixNano: stop.UnixNano(), Reports: []*fsmpb.AgentUsage{{
				Node: "gw-1", Incarnation: 1, Region: "eu-west",
				Batch: &allotpb.UsageBatch{Seq: 2, CutUnixNano: stop.UnixNano(), Last: tt.last},
			}}}
			f.Apply(entry(t, 3, CmdReports, last))
			f = roundTrip(t, f)
			f.Apply(entry(t, 9, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: hour0.Add(62 * time.Minute).UnixNano(), AgentTimeoutNano: int64(timeout)}))
			var final bool
			f.read(func(s *State) { final = s.final.Has(hour0.Unix()) })
			if final != tt.final {
				t.Fatalf("window final %v two minutes after it ended, want %v", final, tt.final)
			}
			if a, _ := ledgerTotal(f, "acme"); a != 5 {
				t.Errorf("ledger %d admitted, want 5", a)
			}
		})
	}
}

func TestStateRules(t *testing.T) {
	f := testFSM()
	good := &allotpb.Rule{Name: "r", Scope: "tenant", Algorithm: "gcra", Limit: 10, Period: durationpb.New(time.Second), Intent: "quota"}
	if err, ok := f.Apply(entry(t, 1, CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{good}})).(error); ok {
		t.Fatal(err)
	}
	bad := proto.Clone(good).(*allotpb.Rule)
	bad.Name, bad.Limit = "bad", -1
	if _, ok := f.Apply(entry(t, 2, CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{bad}})).(error); !ok {
		t.Fatal("an invalid rule was applied")
	}
	f.read(func(s *State) {
		if s.rules.Len() != 1 || s.rules.Version() != 1 {
			t.Errorf("rules after a refused change: %d rules, version %d", s.rules.Len(), s.rules.Version())
		}
	})
	f.Apply(entry(t, 3, CmdRules, &fsmpb.RulesCommand{Delete: []string{"r"}}))
	f.read(func(s *State) {
		if s.rules.Len() != 0 || s.rules.Version() != 2 {
			t.Errorf("after delete: %d rules, version %d", s.rules.Len(), s.rules.Version())
		}
	})
}

// TestStateSnapshotRestore: a snapshot restores to an identical state.
func TestStateSnapshotRestore(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour), ReportIntervalNano: int64(time.Second), LeaseTtlNano: int64(5 * time.Second)}))
	f.Apply(entry(t, 2, CmdEpoch, &fsmpb.EpochCommand{Leader: "n1"}))
	f.Apply(entry(t, 3, CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: "n1", RaftAddress: "127.0.0.1:1", GrpcAddress: "127.0.0.1:2"}}))
	f.Apply(entry(t, 4, CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{{Name: "r", Scope: "tenant", Algorithm: "gcra", Limit: 10, Period: durationpb.New(time.Second), Intent: "quota"}}}))
	for i := uint64(1); i <= 50; i++ {
		f.Apply(entry(t, 4+i, CmdReports, usageCmd(hour0.Add(time.Duration(i)*3*time.Minute), "gw-"+string(rune('a'+i%5)), 1, i, "t"+string(rune('a'+i%7)), i, i%3)))
	}
	f.Apply(entry(t, 60, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: hour0.Add(5 * time.Hour).UnixNano(), AgentTimeoutNano: int64(time.Minute)}))
	f.Apply(entry(t, 61, CmdGrants|Ignorable, &fsmpb.GrantsCommand{Epoch: 1, Seq: 1, Region: "eu-west", Grants: []*fsmpb.GrantRecord{
		{Tenant: "ta", Rule: "plan-quota", WindowUnix: hour0.Unix(), Granted: 1234.5}}}))

	g := roundTrip(t, f)
	var a, b string
	f.read(func(s *State) { a = dumpState(s) })
	g.read(func(s *State) { b = dumpState(s) })
	if a != b {
		t.Fatalf("restored state differs:\n%s\n---\n%s", a, b)
	}
	g.read(func(s *State) {
		if s.reportInterval != int64(time.Second) || s.leaseTTL != int64(5*time.Second) {
			t.Errorf("settings not restored: interval %d, TTL %d", s.reportInterval, s.leaseTTL)
		}
	})
	checkIndex(t, g, "after restore")
	if err := testFSM().Restore(io.NopCloser(strings.NewReader("\x05garbage"))); err == nil {
		t.Error("a corrupt snapshot restored without error")
	}
}

// TestStateGrants: what a region's leader records of its leases from the
// parent is added once per command (a command retried after a timeout,
// or replayed by an earlier epoch, changes nothing), lands on the
// region's line of the window, creates the line for a tenant with no
// usage yet, and that window becomes final in its turn.
func TestStateGrants(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	f.Apply(entry(t, 2, CmdReports, usageCmd(hour0.Add(time.Minute), "gw-1", 7, 1, "acme", 100, 5)))
	grant := func(index, epoch, seq uint64, tenant string, g float64) {
		f.Apply(entry(t, index, CmdGrants|Ignorable, &fsmpb.GrantsCommand{Epoch: epoch, Seq: seq, Region: "eu-west",
			Grants: []*fsmpb.GrantRecord{{Tenant: tenant, Rule: "plan-quota", WindowUnix: hour0.Unix(), Granted: g}}}))
	}
	grant(3, 2, 1, "acme", 1500)
	grant(4, 2, 1, "acme", 1500) // the same command, retried
	grant(5, 2, 2, "acme", 250)
	grant(6, 1, 9, "acme", 999) // from an earlier leader, late
	grant(7, 2, 3, "idle", 42)
	var got []string
	f.read(func(s *State) { got = dumpLedger(s) })
	want := []string{"ledger acme/plan-quota/eu-west/" + strconv.FormatInt(hour0.Unix(), 10) + " 100 5 granted 1750",
		"ledger idle/plan-quota/eu-west/" + strconv.FormatInt(hour0.Unix(), 10) + " 0 0 granted 42"}
	if !slices.Equal(got, want) {
		t.Fatalf("ledger:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	f.Apply(entry(t, 8, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: hour0.Add(3 * time.Hour).UnixNano(), AgentTimeoutNano: int64(time.Minute)}))
	f.read(func(s *State) {
		if !s.final.Has(hour0.Unix()) {
			t.Error("the window with grants never became final")
		}
	})
}
