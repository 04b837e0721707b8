package state

import (
	"errors"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/protobuf/types/known/durationpb"
)

func noticeRule(limit int64, period time.Duration, notices ...float64) *allotpb.Rule {
	return &allotpb.Rule{Name: "plan-quota", Scope: "tenant", Algorithm: "fixed_window", Limit: limit,
		Period: durationpb.New(period), Intent: "quota", Notices: notices}
}

func noticesOf(f *machine, pendingOnly bool) []*allotpb.Notice {
	var out []*allotpb.Notice
	f.read(func(s *State) {
		s.EachNotice(pendingOnly, func(n *allotpb.Notice) bool { out = append(out, n); return true })
	})
	return out
}

// TestNoticesRecordedOnce: a tenant's usage this cycle records one notice
// per threshold it crosses, at the application that crosses it, whatever
// repeats; a new cycle starts a new tally; a delivery marks notices
// delivered once; a snapshot carries tallies and notices, so a restored
// member records none again.
func TestNoticesRecordedOnce(t *testing.T) {
	f := testFSM()
	day := 24 * time.Hour
	if err, ok := f.Apply(entry(t, 1, CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{noticeRule(100, day, 0.8, 1)}})).(error); ok {
		t.Fatal(err)
	}
	at := hour0
	f.Apply(entry(t, 2, CmdReports, usageCmd(at, "n1", 1, 1, "acme", 50, 0)))
	if got := noticesOf(f, false); len(got) != 0 {
		t.Fatalf("notices at 50 of 100: %v", got)
	}
	f.Apply(entry(t, 3, CmdReports, usageCmd(at.Add(time.Minute), "n1", 1, 2, "acme", 35, 3)))
	f.Apply(entry(t, 4, CmdReports, usageCmd(at.Add(time.Minute), "n1", 1, 2, "acme", 35, 3))) // a repeat
	got := noticesOf(f, true)
	start, end := hour0.Truncate(day).Unix(), hour0.Truncate(day).Add(day).Unix()
	if len(got) != 1 || got[0].GetThreshold() != 0.8 || got[0].GetUsed() != 85 || got[0].GetLimit() != 100 ||
		got[0].GetCycleStartUnix() != start || got[0].GetCycleEndUnix() != end ||
		got[0].GetKey() != NoticeKey("acme", "plan-quota", start, 0.8) || got[0].GetCrossedUnixNano() != at.Add(time.Minute).UnixNano() {
		t.Fatalf("notices at 85 of 100: %v", got)
	}
	// Another member restored from a snapshot taken now goes on alike.
	g := roundTrip(t, f)
	for i, m := range []*machine{f, g} {
		m.Apply(entry(t, 5, CmdReports, usageCmd(at.Add(2*time.Minute), "n1", 1, 3, "acme", 40, 0)))
		m.Apply(entry(t, 6, CmdReports, usageCmd(at.Add(3*time.Minute), "n1", 1, 4, "acme", 40, 0)))
		if got := noticesOf(m, false); len(got) != 2 || got[1].GetThreshold() != 1 || got[1].GetUsed() != 125 {
			t.Fatalf("member %d: notices past 100 of 100: %v", i, got)
		}
	}
	if a, b := dumpState(f.st), dumpState(g.st); a != b {
		t.Fatalf("a restored member diverged:\n%s\n---\n%s", a, b)
	}
	f.Apply(entry(t, 7, CmdNoticesDelivered|Ignorable, &fsmpb.NoticesDeliveredCommand{
		Keys: []string{NoticeKey("acme", "plan-quota", start, 0.8), "no/such/0/1"}, NowUnixNano: at.Add(4 * time.Minute).UnixNano(),
	}))
	f.Apply(entry(t, 8, CmdNoticesDelivered|Ignorable, &fsmpb.NoticesDeliveredCommand{
		Keys: []string{NoticeKey("acme", "plan-quota", start, 0.8)}, NowUnixNano: at.Add(5 * time.Minute).UnixNano(),
	}))
	f.read(func(s *State) {
		if s.PendingNotices() != 1 {
			t.Errorf("pending after one delivery: %d, want 1", s.PendingNotices())
		}
	})
	if got := noticesOf(f, false); got[0].GetDeliveredUnixNano() != at.Add(4*time.Minute).UnixNano() {
		t.Errorf("delivered at %d, want the first delivery's %d", got[0].GetDeliveredUnixNano(), at.Add(4*time.Minute).UnixNano())
	}
	// The sink's record is apart from the webhook's.
	f.Apply(entry(t, 8, CmdNoticesDelivered|Ignorable, &fsmpb.NoticesDeliveredCommand{
		Keys: []string{NoticeKey("acme", "plan-quota", start, 1)}, NowUnixNano: at.Add(6 * time.Minute).UnixNano(), Sink: true,
	}))
	f.read(func(s *State) {
		if s.PendingNotices() != 1 || s.UnstoredNotices() != 1 {
			t.Errorf("pending %d, unstored %d; want 1 and 1", s.PendingNotices(), s.UnstoredNotices())
		}
	})
	if got := noticesOf(f, true); len(got) != 1 || got[0].GetThreshold() != 1 || got[0].GetStoredUnixNano() != at.Add(6*time.Minute).UnixNano() {
		t.Errorf("pending after the sink stored the 100%% notice: %v", got)
	}
	// The next cycle starts from nothing.
	next := at.Add(day)
	f.Apply(entry(t, 9, CmdReports, usageCmd(next, "n1", 1, 5, "acme", 90, 0)))
	if got := noticesOf(f, true); len(got) != 2 || got[1].GetCycleStartUnix() != start+int64(day/time.Second) || got[1].GetUsed() != 90 {
		t.Fatalf("notices of the next cycle: %v", got)
	}
	if a, b := dumpState(f.st), dumpState(roundTrip(t, f).st); a != b {
		t.Fatalf("the snapshot lost notices:\n%s\n---\n%s", a, b)
	}
	// Maintenance long after drops what is past its horizon.
	f.Apply(entry(t, 10, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: next.Add(KeepNotices + 3*day).UnixNano(), AgentTimeoutNano: int64(time.Minute)}))
	if got := noticesOf(f, false); len(got) != 0 {
		t.Errorf("notices kept past their horizon: %v", got)
	}
	f.read(func(s *State) {
		if s.PendingNotices() != 0 || s.UnstoredNotices() != 0 || s.notices.tallies.Len() != 0 {
			t.Errorf("pending %d, unstored %d, tallies %d after the horizon", s.PendingNotices(), s.UnstoredNotices(), s.notices.tallies.Len())
		}
	})
}

// TestNoticesLimitInForce: a tenant's override sets the limit its
// thresholds are fractions of.
func TestNoticesLimitInForce(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{noticeRule(100, time.Hour, 0.5)}}))
	f.Apply(entry(t, 2, CmdOverrides, &fsmpb.OverridesCommand{Put: []*allotpb.Override{{Rule: "plan-quota", Tenant: "big", Limit: 1000}}, NowUnixNano: hour0.UnixNano()}))
	f.Apply(entry(t, 3, CmdReports, usageCmd(hour0, "n1", 1, 1, "big", 400, 0)))
	f.Apply(entry(t, 4, CmdReports, usageCmd(hour0, "n1", 1, 2, "small", 60, 0)))
	got := noticesOf(f, false)
	if len(got) != 1 || got[0].GetTenant() != "small" || got[0].GetLimit() != 100 {
		t.Fatalf("notices: %v", got)
	}
	f.Apply(entry(t, 5, CmdReports, usageCmd(hour0, "n1", 1, 3, "big", 100, 0)))
	if got := noticesOf(f, false); len(got) != 2 || got[0].GetTenant() != "big" || got[0].GetLimit() != 1000 || got[0].GetUsed() != 500 {
		t.Fatalf("notices: %v", got)
	}
}

// TestNoticesCycleOfWholeWindows: a rule with notices whose period is not
// a whole number of billing windows is refused, by the proposer's check
// and by the application alike, and changes nothing.
func TestNoticesCycleOfWholeWindows(t *testing.T) {
	for _, period := range []time.Duration{30 * time.Minute, 90 * time.Minute} {
		f := testFSM()
		cmd := &fsmpb.RulesCommand{Put: []*allotpb.Rule{noticeRule(100, period, 0.8)}}
		f.read(func(s *State) {
			if err := s.CheckRules(cmd); !errors.Is(err, rules.ErrInvalid) {
				t.Errorf("period %v: CheckRules = %v, want a rules.ErrInvalid", period, err)
			}
		})
		if _, ok := f.Apply(entry(t, 1, CmdRules, cmd)).(error); !ok {
			t.Errorf("period %v: applied", period)
		}
		f.read(func(s *State) {
			if s.rules.Len() != 0 {
				t.Errorf("period %v: the refused rule is in the set", period)
			}
		})
	}
}
