package state

import (
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// monthlyRule is a calendar month's quota keyed by tenant, on the 1st in
// UTC unless a tenant's override anchors it elsewhere.
func monthlyRule(name string, limit int64) *allotpb.Rule {
	return &allotpb.Rule{Name: name, Scope: "tenant", Algorithm: "fixed_window", Limit: limit,
		Period: durationpb.New(720 * time.Hour), Cycle: &allotpb.Cycle{Unit: "month"}, Intent: "quota"}
}

// reportAt is one report of one count: tenant's usage under rule in the
// billing window holding window, applied at now.
func reportAt(now, window time.Time, seq uint64, rule, tenant string, admitted uint64) *fsmpb.ReportsCommand {
	return &fsmpb.ReportsCommand{ProposedUnixNano: now.UnixNano(), Reports: []*fsmpb.AgentUsage{{
		Node: "gw-1", Incarnation: 1, Region: "eu-west",
		Batch: &allotpb.UsageBatch{Seq: seq, CutUnixNano: now.UnixNano(), Counts: []*allotpb.UsageCount{
			{Rule: rule, Tenant: tenant, WindowUnix: window.Unix(), Admitted: admitted},
		}},
	}}}
}

// termsAt are the terms of the ledger's line of tenant under rule in the
// billing window starting at window.
func termsAt(t *testing.T, f *machine, window time.Time, rule, tenant string) ledger.Terms {
	t.Helper()
	var terms ledger.Terms
	found := false
	f.read(func(s *State) {
		it, ok := s.ledger.Get(lineItem{key: ledger.Key{Window: window.Unix(), Tenant: tenant, Rule: rule, Region: "eu-west"}})
		terms, found = it.u.terms, ok
	})
	if !found {
		t.Fatalf("no line of %s under %s in the window of %s", tenant, rule, window.Format(time.RFC3339))
	}
	return terms
}

// TestLedgerTerms: a line records the tenant's cycle of the rule that its
// window belongs to and the limit in force, as the usage is applied: for
// an anchored monthly tenant its month from the anchor's midnight in its
// zone and its override's limit; for a tenant of the rule's own cycle the
// 1st and the rule's limit; for a fixed period the period's window; for
// rules without a tenant's cycle nothing. A plan changed mid-cycle
// changes the limit of later windows only, though usage of an earlier one
// is applied after the change. A snapshot keeps the terms.
func TestLedgerTerms(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	userRule := monthlyRule("per-user", 50)
	userRule.Scope = "user"
	minute := &allotpb.Rule{Name: "per-minute", Scope: "tenant", Algorithm: "fixed_window", Limit: 600,
		Period: durationpb.New(time.Minute), Intent: "quota"}
	daily := &allotpb.Rule{Name: "daily", Scope: "tenant", Algorithm: "sliding_window", Limit: 5000,
		Period: durationpb.New(24 * time.Hour), Intent: "quota", Tenants: map[string]*allotpb.TenantOverride{"acme": {Limit: 7000}}}
	plans := monthlyRule("plans", 100)
	plans.Plans = map[string]*allotpb.Plan{"pro": {Limit: 1000, Cycle: &allotpb.Anchor{AnchorDay: 5}}}
	if err, ok := f.Apply(entry(t, 2, CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{
		monthlyRule("monthly", 100000), userRule, minute, daily, plans,
	}})).(error); ok {
		t.Fatal(err)
	}
	at := hour0 // 2026-11-29T10:00:00Z
	f.Apply(entry(t, 3, CmdOverrides, &fsmpb.OverridesCommand{Put: []*allotpb.Override{
		{Rule: "monthly", Tenant: "acme", Limit: 250000, Cycle: &allotpb.Anchor{AnchorDay: 17, TimeZone: "America/New_York"}},
		{Rule: "plans", Tenant: "acme", Limit: 300},
	}, NowUnixNano: at.UnixNano()}))
	seq := uint64(0)
	report := func(now, window time.Time, rule, tenant string) {
		seq++
		f.Apply(entry(t, 3+seq, CmdReports, reportAt(now, window, seq, rule, tenant, 10)))
	}
	for _, rule := range []string{"monthly", "per-user", "per-minute", "daily", "plans"} {
		for _, tenant := range []string{"acme", "globex"} {
			report(at.Add(10*time.Minute), at, rule, tenant)
		}
	}
	nyMidnight17 := time.Date(2026, 11, 17, 0, 0, 0, 0, time.UTC).Add(5 * time.Hour) // EST is UTC−5
	day := at.Truncate(24 * time.Hour)
	for _, tc := range []struct {
		rule, tenant string
		want         ledger.Terms
	}{
		{"monthly", "acme", ledger.Terms{CycleStart: nyMidnight17.Unix(), Limit: 250000}},
		{"monthly", "globex", ledger.Terms{CycleStart: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Unix(), Limit: 100000}},
		{"daily", "acme", ledger.Terms{CycleStart: day.Unix(), Limit: 7000}},
		{"daily", "globex", ledger.Terms{CycleStart: day.Unix(), Limit: 5000}},
		// A user's limit is each user's, and a minute has no cycle an
		// hour's window belongs to.
		{"per-user", "acme", ledger.Terms{}},
		{"per-minute", "acme", ledger.Terms{}},
		// A plan's limit and anchor are unknown to the coordinators;
		// acme's override sets its limit, not its anchor.
		{"plans", "acme", ledger.Terms{Limit: 300}},
		{"plans", "globex", ledger.Terms{}},
	} {
		if got := termsAt(t, f, at, tc.rule, tc.tenant); got != tc.want {
			t.Errorf("%s under %s: terms %+v, want %+v", tc.tenant, tc.rule, got, tc.want)
		}
	}

	// The plan changes in the next window: that window's line has the
	// new limit; the window before keeps its own, though a report of its
	// usage comes after the change.
	next := at.Add(time.Hour)
	f.Apply(entry(t, 100, CmdOverrides, &fsmpb.OverridesCommand{Put: []*allotpb.Override{
		{Rule: "monthly", Tenant: "acme", Limit: 400000, Cycle: &allotpb.Anchor{AnchorDay: 17, TimeZone: "America/New_York"}},
	}, NowUnixNano: next.Add(5 * time.Minute).UnixNano()}))
	report(next.Add(6*time.Minute), at, "monthly", "acme")
	report(next.Add(7*time.Minute), next, "monthly", "acme")
	if got, want := termsAt(t, f, at, "monthly", "acme"), (ledger.Terms{CycleStart: nyMidnight17.Unix(), Limit: 250000}); got != want {
		t.Errorf("the window before the change: terms %+v, want %+v", got, want)
	}
	if got, want := termsAt(t, f, next, "monthly", "acme"), (ledger.Terms{CycleStart: nyMidnight17.Unix(), Limit: 400000}); got != want {
		t.Errorf("the window after the change: terms %+v, want %+v", got, want)
	}

	// The anchored tenant's next cycle starts on the 17th of December
	// at midnight in New York; a window before it is November's.
	dec17 := time.Date(2026, 12, 17, 5, 0, 0, 0, time.UTC)
	report(dec17.Add(-time.Hour+time.Minute), dec17.Add(-time.Hour), "monthly", "acme")
	report(dec17.Add(time.Minute), dec17, "monthly", "acme")
	if got := termsAt(t, f, dec17.Add(-time.Hour), "monthly", "acme"); got.CycleStart != nyMidnight17.Unix() {
		t.Errorf("the cycle's last window: cycle from %v, want %v", time.Unix(got.CycleStart, 0).UTC(), nyMidnight17)
	}
	if got := termsAt(t, f, dec17, "monthly", "acme"); got.CycleStart != dec17.Unix() {
		t.Errorf("the next cycle's first window: cycle from %v, want %v", time.Unix(got.CycleStart, 0).UTC(), dec17)
	}

	// Exported pages and a restored member carry them.
	var lines []ledger.Line
	f.read(func(s *State) { s.Ledger(func(l ledger.Line) bool { lines = append(lines, l); return true }) })
	for _, l := range lines {
		if l.Tenant == "acme" && l.Rule == "monthly" && l.Window == at.Unix() && l.Terms != (ledger.Terms{CycleStart: nyMidnight17.Unix(), Limit: 250000}) {
			t.Errorf("the state's line %v lost its terms", l)
		}
	}
	if a, b := dumpState(f.st), dumpState(roundTrip(t, f).st); a != b {
		t.Fatalf("the snapshot lost terms:\n%s\n---\n%s", a, b)
	}
}
