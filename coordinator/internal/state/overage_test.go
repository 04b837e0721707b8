package state

import (
	"errors"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/protobuf/types/known/durationpb"
)

// overageRule is a monthly quota of limit on the 1st in UTC, with
// overage up to twice it and notices up to the cap.
func overageRule(limit int64) *allotpb.Rule {
	r := monthlyRule("plan-quota", limit)
	r.Overage = &allotpb.Overage{UpTo: 2}
	r.Notices = []float64{1, 2}
	return r
}

// lineOverage is the admitted units and overage of the ledger's line of
// tenant under plan-quota in the billing window starting at window.
func lineOverage(t *testing.T, f *machine, window time.Time, tenant string) (admitted, overage uint64) {
	t.Helper()
	found := false
	f.read(func(s *State) {
		it, ok := s.ledger.Get(lineItem{key: ledger.Key{Window: window.Unix(), Tenant: tenant, Rule: "plan-quota", Region: "eu-west"}})
		admitted, overage, found = it.u.admitted, it.u.overage, ok
	})
	if !found {
		t.Fatalf("no line of %s in the window of %s", tenant, window.Format(time.RFC3339))
	}
	return admitted, overage
}

// TestOverageFold: under a rule with overage, the part of each report's
// admitted units that takes the tenant's cycle past the limit in force is
// the line's overage, an increment crossing the limit split at it; a
// cycle's overage is what its usage passed the limit by, each unit
// against the limit in force when it was applied, whatever the windows
// and repeats; a notice at the cap is recorded as the cap is reached; the
// next cycle starts from nothing; a snapshot keeps lines and tallies, so
// a restored member goes on alike; maintenance long after forgets the
// tally.
func TestOverageFold(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	if err, ok := f.Apply(entry(t, 2, CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{overageRule(100)}})).(error); ok {
		t.Fatal(err)
	}
	at := hour0 // 2026-11-29T10:00:00Z: the cycle from 1 November
	seq := uint64(0)
	report := func(m *machine, now, window time.Time, admitted uint64) {
		seq++
		m.Apply(entry(t, 2+seq, CmdReports, reportAt(now, window, seq, "plan-quota", "acme", admitted)))
	}
	check := func(m *machine, window time.Time, wantAdmitted, wantOverage uint64) {
		t.Helper()
		if a, o := lineOverage(t, m, window, "acme"); a != wantAdmitted || o != wantOverage {
			t.Errorf("the line of %s: admitted %d, overage %d; want %d and %d", window.Format(time.RFC3339), a, o, wantAdmitted, wantOverage)
		}
	}
	cycle := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Unix()
	cycleOverage := func(m *machine) (o uint64) {
		m.read(func(s *State) { o = s.CycleOverage("plan-quota", "acme", cycle) })
		return o
	}

	report(f, at.Add(time.Minute), at, 60)
	check(f, at, 60, 0)
	// 60 to 130: 40 within the limit, 30 past it.
	report(f, at.Add(2*time.Minute), at, 70)
	check(f, at, 130, 30)
	// A repeat of the batch counts nothing.
	f.Apply(entry(t, 2+seq, CmdReports, reportAt(at.Add(2*time.Minute), at, seq, "plan-quota", "acme", 70)))
	check(f, at, 130, 30)
	// Past the limit, every unit is overage, in any window.
	next := at.Add(time.Hour)
	report(f, next.Add(time.Minute), next, 50)
	check(f, next, 50, 50)
	if got := cycleOverage(f); got != 80 {
		t.Errorf("the cycle's overage: %d, want 180 − 100 = 80", got)
	}

	// A member restored from a snapshot goes on alike.
	g := roundTrip(t, f)
	for i, m := range []*machine{f, g} {
		s := seq
		report(m, next.Add(2*time.Minute), next, 25) // 180 to 205: past the cap of 200
		seq = s
		check(m, next, 75, 75)
		if got := cycleOverage(m); got != 105 {
			t.Errorf("member %d: the cycle's overage %d, want 205 − 100", i, got)
		}
		if got := noticesOf(m, false); len(got) != 2 || got[1].GetThreshold() != 2 || got[1].GetUsed() != 205 || got[1].GetLimit() != 100 {
			t.Errorf("member %d: notices %v, want 100%% and the cap's 200%%", i, got)
		}
	}
	seq++
	if a, b := dumpState(f.st), dumpState(g.st); a != b {
		t.Fatalf("a restored member diverged:\n%s\n---\n%s", a, b)
	}

	// An upgrade mid-cycle: the units applied after it are counted
	// against the new limit (205 to 215 under 210: 5 past it), those
	// before stay as they were counted.
	f.Apply(entry(t, 100, CmdOverrides, &fsmpb.OverridesCommand{Put: []*allotpb.Override{{Rule: "plan-quota", Tenant: "acme", Limit: 210}},
		NowUnixNano: next.Add(3 * time.Minute).UnixNano()}))
	report(f, next.Add(4*time.Minute), next, 10)
	check(f, next, 85, 80)
	if got := cycleOverage(f); got != 110 {
		t.Errorf("after the upgrade: the cycle's overage %d, want 105 + 5", got)
	}

	// The next cycle starts from nothing.
	dec := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	report(f, dec.Add(time.Minute), dec, 150)
	check(f, dec, 150, 0)

	// Maintenance long after forgets the tallies, not the lines.
	f.Apply(entry(t, 200, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: dec.Add(KeepNotices + 90*24*time.Hour).UnixNano(), AgentTimeoutNano: int64(time.Minute)}))
	f.read(func(s *State) {
		if n := s.notices.tallies.Len(); n != 0 {
			t.Errorf("%d tallies long after their cycles", n)
		}
	})
	check(f, next, 85, 80)
}

// TestOverageCycleOfWholeWindows: a rule with overage whose period is not
// a whole number of billing windows is refused, by the proposer's check
// and by the application alike, and changes nothing.
func TestOverageCycleOfWholeWindows(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	r := &allotpb.Rule{Name: "plan-quota", Scope: "tenant", Algorithm: "sliding_window", Limit: 100,
		Period: durationpb.New(90 * time.Minute), Intent: "quota", Overage: &allotpb.Overage{UpTo: 2}}
	cmd := &fsmpb.RulesCommand{Put: []*allotpb.Rule{r}}
	f.read(func(s *State) {
		var es rules.Errors
		if err := s.CheckRules(cmd); !errors.As(err, &es) || es[0].Field != "overage" {
			t.Errorf("CheckRules = %v, want an error on overage", err)
		}
	})
	if _, ok := f.Apply(entry(t, 2, CmdRules, cmd)).(error); !ok {
		t.Error("applied")
	}
	f.read(func(s *State) {
		if s.rules.Len() != 0 {
			t.Error("the refused rule is in the set")
		}
	})
}
