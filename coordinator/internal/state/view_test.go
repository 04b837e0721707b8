package state

import (
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestViewSeesNothingAppliedAfterIt: a view is the state at one entry,
// whatever is applied after it: new rules, members, overrides, resets,
// an agent's next batch. It is read while the entries are applied (run
// with -race: the view shares the state's trees, which Apply copies
// before it changes them).
func TestViewSeesNothingAppliedAfterIt(t *testing.T) {
	f := overridesMachine(t)
	f.Apply(entry(t, 2, CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: "n1", RaftAddress: "127.0.0.1:1"}}))
	f.Apply(entry(t, 3, CmdReports, usageCmd(hour0, "gw-1", 1, 1, "acme", 10, 0)))
	putOverrides(t, f, hour0, &allotpb.Override{Rule: "plan-quota", Tenant: "acme", Limit: 500})

	v := f.st.View()
	check := func(when string) {
		t.Helper()
		if got := v.Rules().Len(); got != 2 {
			t.Errorf("%s: the view holds %d rules; want the 2 it was made with", when, got)
		}
		if got := len(v.Members()); got != 1 {
			t.Errorf("%s: the view holds %d members; want 1", when, got)
		}
		if seq, ok := v.LastSeq("gw-1", 1); !ok || seq != 1 {
			t.Errorf("%s: the view's gw-1 batch is %d (%v); want 1", when, seq, ok)
		}
		if v.HasNode("gw-2") {
			t.Errorf("%s: the view knows gw-2", when)
		}
		if got := v.OverridesVersion(); got != 1 {
			t.Errorf("%s: the view's overrides are at version %d; want 1", when, got)
		}
		if d := v.OverridesSince(0, 100); d == nil || len(d.GetOverrides()) != 1 {
			t.Errorf("%s: the view's overrides since 0: %v; want the one", when, d)
		}
	}
	check("at once")

	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				check("while entries are applied")
			}
		}
	})
	for i := range uint64(200) {
		f.Apply(entry(t, 4, CmdReports, usageCmd(hour0.Add(time.Duration(i)*time.Second), "gw-"+string(rune('1'+i%5)), 1, i/5+2, "acme", 1, 0)))
		if i%20 == 0 {
			putOverrides(t, f, hour0, &allotpb.Override{Rule: "plan-quota", Tenant: "t" + string(rune('a'+i/20)), Limit: 100})
			f.Apply(entry(t, 5, CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: "m" + string(rune('a'+i/20)), RaftAddress: "127.0.0.1:2"}}))
		}
	}
	f.Apply(entry(t, 6, CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{{Name: "more", Scope: "tenant", Algorithm: "gcra", Limit: 5, Period: durationpb.New(time.Second), Intent: "quota"}}}))
	close(stop)
	wg.Wait()
	check("after")
	if now := f.st.View(); now.Rules().Len() != 3 || !now.HasNode("gw-2") || now.OverridesVersion() == 1 {
		t.Errorf("a view made after the entries does not show them: %d rules, gw-2 %v, overrides version %d", now.Rules().Len(), now.HasNode("gw-2"), now.OverridesVersion())
	}
}
