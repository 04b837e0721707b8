package state

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/protobuf/types/known/durationpb"
)

func resetsMachine(t *testing.T) *machine {
	t.Helper()
	f := testFSM()
	put := []*allotpb.Rule{
		{Name: "plan-quota", Scope: "tenant", Algorithm: "fixed_window", Limit: 10, Period: durationpb.New(time.Hour), Intent: "quota"},
		{Name: "per-user", Scope: "user", Algorithm: "gcra", Limit: 100, Period: durationpb.New(time.Second), Intent: "quota"},
		{Name: "edge", Scope: "global", Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second), Intent: "capacity"},
		{Name: "abuse", Scope: "ip", Algorithm: "gcra", Limit: 10, Period: durationpb.New(time.Second), Intent: "abuse"},
		{Name: "envoy", Scope: "descriptor", Algorithm: "gcra", Limit: 10, Period: durationpb.New(time.Second), Intent: "capacity",
			Match: &allotpb.Match{Domain: "edge", Descriptors: []*allotpb.DescriptorEntry{{Key: "path"}}}},
	}
	if err, ok := f.Apply(entry(t, 1, CmdRules, &fsmpb.RulesCommand{Put: put})).(error); ok {
		t.Fatal(err)
	}
	return f
}

func applyReset(t *testing.T, f *machine, at time.Time, r *allotpb.Reset) any {
	t.Helper()
	return f.Apply(entry(t, 0, CmdReset, &fsmpb.ResetCommand{Entry: r, NowUnixNano: at.UnixNano()}))
}

func TestResetsApplyVersionsAndSince(t *testing.T) {
	f := resetsMachine(t)
	res := applyReset(t, f, hour0, &allotpb.Reset{Rule: "per-user", Tenant: "acme", User: "bob", By: "ops", Reason: "case 42"})
	r, ok := res.(*allotpb.Reset)
	if !ok {
		t.Fatalf("apply: %v", res)
	}
	if r.GetVersion() != 1 || r.GetAtUnixNano() != hour0.UnixNano() || r.GetKey() != string(rules.AppendKey(nil, "acme", "bob")) || r.GetBy() != "ops" || r.GetReason() != "case 42" {
		t.Fatalf("recorded %v", r)
	}
	// A tenant key's all_keys is its one key; a global rule's key is
	// the rule.
	r2 := applyReset(t, f, hour0, &allotpb.Reset{Rule: "plan-quota", Tenant: "acme", AllKeys: true}).(*allotpb.Reset)
	if r2.GetAllKeys() || r2.GetKey() != "acme" || r2.GetVersion() != 2 {
		t.Fatalf("tenant rule's all_keys: %v", r2)
	}
	r3 := applyReset(t, f, hour0, &allotpb.Reset{Rule: "edge"}).(*allotpb.Reset)
	if r3.GetKey() != "" || r3.GetAllKeys() {
		t.Fatalf("global: %v", r3)
	}
	r4 := applyReset(t, f, hour0, &allotpb.Reset{Rule: "per-user", Tenant: "acme", AllKeys: true}).(*allotpb.Reset)
	if !r4.GetAllKeys() || r4.GetKey() != "" || r4.GetTenant() != "acme" {
		t.Fatalf("tenant reset: %v", r4)
	}
	if f.st.ResetsVersion() != 4 || f.st.ResetsCount() != 4 {
		t.Fatalf("version %d count %d", f.st.ResetsVersion(), f.st.ResetsCount())
	}
	d := f.st.ResetsSince(1, 2, false)
	if d.GetVersion() != 3 || !d.GetMore() || d.GetFull() || len(d.GetResets()) != 2 || d.GetResets()[0].GetVersion() != 2 {
		t.Fatalf("since 1, 2 at most: %v", d)
	}
	if d := f.st.ResetsSince(4, 100, false); d != nil {
		t.Fatalf("since the current version: %v", d)
	}
	// A fresh process takes the version alone; a follower ahead (another
	// cluster, a restored backup) takes the version, told it is full.
	if d := f.st.ResetsSince(0, 100, true); d.GetVersion() != 4 || len(d.GetResets()) != 0 || d.GetFull() {
		t.Fatalf("fresh: %v", d)
	}
	if d := f.st.ResetsSince(9, 100, false); d.GetVersion() != 4 || len(d.GetResets()) != 0 || !d.GetFull() {
		t.Fatalf("ahead: %v", d)
	}
	var listed []uint64
	f.st.ListResets(0, "per-user", "acme", func(r *allotpb.Reset) bool { listed = append(listed, r.GetVersion()); return true })
	if len(listed) != 2 || listed[0] != 1 || listed[1] != 4 {
		t.Fatalf("listed %v", listed)
	}
	if a, b := dumpState(f.st), dumpState(roundTrip(t, f).st); a != b {
		t.Fatalf("snapshot round trip differs:\n%s\n---\n%s", a, b)
	}
}

func TestResetsRefusedNameTheField(t *testing.T) {
	f := resetsMachine(t)
	for _, tc := range []struct {
		name  string
		r     *allotpb.Reset
		field string
	}{
		{"no rule", &allotpb.Reset{Tenant: "acme"}, "rule"},
		{"unknown rule", &allotpb.Reset{Rule: "nope", Tenant: "acme"}, "rule"},
		{"descriptor", &allotpb.Reset{Rule: "envoy"}, "rule"},
		{"missing user", &allotpb.Reset{Rule: "per-user", Tenant: "acme"}, "user"},
		{"missing tenant", &allotpb.Reset{Rule: "per-user", User: "bob"}, "tenant"},
		{"route not in key", &allotpb.Reset{Rule: "per-user", Tenant: "acme", User: "bob", Route: "/x"}, "route"},
		{"tenant of an ip key", &allotpb.Reset{Rule: "abuse", Tenant: "acme", Ip: "10.0.0.1"}, "tenant"},
		{"all keys of an ip key", &allotpb.Reset{Rule: "abuse", Ip: "10.0.0.1", AllKeys: true}, "all_keys"},
		{"all keys and a user", &allotpb.Reset{Rule: "per-user", Tenant: "acme", User: "bob", AllKeys: true}, "user"},
		{"global with a tenant", &allotpb.Reset{Rule: "edge", Tenant: "acme"}, "tenant"},
		{"long reason", &allotpb.Reset{Rule: "edge", Reason: strings.Repeat("x", maxResetValue+1)}, "reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := applyReset(t, f, hour0, tc.r)
			var es rules.Errors
			if err, ok := res.(error); !ok || !errors.As(err, &es) {
				t.Fatalf("applied: %v", res)
			}
			found := false
			for _, e := range es {
				found = found || e.Field == tc.field
			}
			if !found {
				t.Fatalf("errors %v name no %q", es, tc.field)
			}
			if f.st.ResetsVersion() != 0 {
				t.Fatal("a refused reset moved the version")
			}
		})
	}
}

func TestResetsKeepTheNewest(t *testing.T) {
	f := resetsMachine(t)
	n := MaxResets + 5
	for i := range n {
		applyReset(t, f, hour0.Add(time.Duration(i)), &allotpb.Reset{Rule: "edge"})
	}
	if f.st.ResetsCount() != MaxResets || f.st.ResetsVersion() != uint64(n) || f.st.resets.floor != 5 {
		t.Fatalf("count %d version %d floor %d", f.st.ResetsCount(), f.st.ResetsVersion(), f.st.resets.floor)
	}
	// A follower below the floor has missed some: full, from the oldest
	// kept.
	d := f.st.ResetsSince(2, 10, false)
	if !d.GetFull() || d.GetResets()[0].GetVersion() != 6 || !d.GetMore() {
		t.Fatalf("since 2: full %v first %d more %v", d.GetFull(), d.GetResets()[0].GetVersion(), d.GetMore())
	}
	if d := f.st.ResetsSince(5, 10, false); d.GetFull() {
		t.Fatal("since the floor: nothing missed, yet full")
	}
	g := roundTrip(t, f)
	if a, b := dumpState(f.st), dumpState(g.st); a != b {
		t.Fatal("snapshot round trip differs")
	}
	// The restored state goes on numbering where it was.
	if r := applyReset(t, g, hour0, &allotpb.Reset{Rule: "edge"}).(*allotpb.Reset); r.GetVersion() != uint64(n+1) {
		t.Fatalf("after restore: version %d", r.GetVersion())
	}
}

func TestResetsMirror(t *testing.T) {
	home := resetsMachine(t)
	for range 3 {
		applyReset(t, home, hour0, &allotpb.Reset{Rule: "edge"})
	}
	g := resetsMachine(t)
	d := home.st.ResetsSince(g.st.MirroredResetsVersion(), 2, false)
	g.Apply(entry(t, 0, CmdReset, &fsmpb.ResetCommand{Mirror: true, Mirrored: d.GetResets(), MirrorVersion: d.GetVersion()}))
	if g.st.ResetsVersion() != 2 {
		t.Fatalf("after a page: %d", g.st.ResetsVersion())
	}
	d = home.st.ResetsSince(g.st.MirroredResetsVersion(), 2, false)
	g.Apply(entry(t, 0, CmdReset, &fsmpb.ResetCommand{Mirror: true, Mirrored: d.GetResets(), MirrorVersion: d.GetVersion()}))
	// The same page again (a retried proposal) adds nothing.
	g.Apply(entry(t, 0, CmdReset, &fsmpb.ResetCommand{Mirror: true, Mirrored: d.GetResets(), MirrorVersion: d.GetVersion()}))
	if g.st.ResetsVersion() != 3 || g.st.ResetsCount() != 3 {
		t.Fatalf("mirror at %d with %d", g.st.ResetsVersion(), g.st.ResetsCount())
	}
	// A mirror behind what the home group told an agent answers nothing.
	if d := g.st.ResetsSince(7, 10, false); d != nil {
		t.Fatalf("mirror asked from ahead: %v", d)
	}
	if a, b := dumpState(g.st), dumpState(roundTrip(t, g).st); a != b {
		t.Fatal("snapshot round trip differs")
	}
}

func TestHasUsage(t *testing.T) {
	f := resetsMachine(t)
	f.Apply(entry(t, 0, CmdReports, usageCmd(hour0, "n1", 1, 1, "acme", 3, 0)))
	f.Apply(entry(t, 0, CmdReports, usageCmd(hour0.Add(3*time.Hour), "n1", 1, 2, "globex", 3, 0)))
	for _, tc := range []struct {
		tenant, rule string
		want         bool
	}{
		{"acme", "plan-quota", true},
		{"globex", "plan-quota", true},
		{"initech", "plan-quota", false},
		{"acme", "per-user", false},
		{"", "plan-quota", false},
	} {
		if got := f.st.HasUsage(tc.tenant, tc.rule); got != tc.want {
			t.Errorf("HasUsage(%q, %q) = %v", tc.tenant, tc.rule, got)
		}
	}
}
