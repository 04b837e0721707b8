package state

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/protobuf/types/known/durationpb"
)

func overridesMachine(t *testing.T) *machine {
	t.Helper()
	f := testFSM()
	r := &allotpb.Rule{Name: "plan-quota", Scope: "tenant", Algorithm: "gcra", Limit: 100, Period: durationpb.New(time.Second), Intent: "quota"}
	g := &allotpb.Rule{Name: "edge", Scope: "global", Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second), Intent: "capacity"}
	if err, ok := f.Apply(entry(t, 1, CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{r, g}})).(error); ok {
		t.Fatal(err)
	}
	return f
}

func putOverrides(t *testing.T, f *machine, at time.Time, os ...*allotpb.Override) any {
	t.Helper()
	return f.Apply(entry(t, 0, CmdOverrides, &fsmpb.OverridesCommand{Put: os, NowUnixNano: at.UnixNano()}))
}

func TestOverridesPutGetDeleteAndChanges(t *testing.T) {
	f := overridesMachine(t)
	if v := putOverrides(t, f, hour0, &allotpb.Override{Rule: "plan-quota", Tenant: "acme", Limit: 500},
		&allotpb.Override{Rule: "edge", Tenant: "acme", Weight: 4}); v != uint64(1) {
		t.Fatalf("first put: %v, want version 1", v)
	}
	o, ok := f.st.Override("plan-quota", "acme")
	if !ok || o.GetLimit() != 500 || o.GetVersion() != 1 || o.GetUpdatedUnixNano() != hour0.UnixNano() {
		t.Fatalf("Override = %v, %v", o, ok)
	}
	putOverrides(t, f, hour0, &allotpb.Override{Rule: "plan-quota", Tenant: "globex", Limit: 50})
	d := f.st.OverridesSince(1, 100)
	if d.GetVersion() != 2 || d.GetFull() || len(d.GetOverrides()) != 1 || d.GetOverrides()[0].GetTenant() != "globex" {
		t.Fatalf("since 1: %v", d)
	}
	if d := f.st.OverridesSince(2, 100); d != nil {
		t.Fatalf("since the current version: %v, want nil", d)
	}
	res := f.Apply(entry(t, 0, CmdOverrides, &fsmpb.OverridesCommand{Delete: []*allotpb.OverrideKey{{Rule: "plan-quota", Tenant: "acme"}}, NowUnixNano: hour0.UnixNano()}))
	if res != uint64(3) {
		t.Fatalf("delete: %v", res)
	}
	if _, ok := f.st.Override("plan-quota", "acme"); ok {
		t.Fatal("a deleted override is still in force")
	}
	d = f.st.OverridesSince(2, 100)
	if len(d.GetOverrides()) != 1 || !d.GetOverrides()[0].GetDeleted() {
		t.Fatalf("since 2: %v, want acme's tombstone", d)
	}
	if f.st.OverridesCount() != 2 {
		t.Fatalf("count %d, want 2", f.st.OverridesCount())
	}
	// Deleting it again is an error, and changes nothing.
	res = f.Apply(entry(t, 0, CmdOverrides, &fsmpb.OverridesCommand{Delete: []*allotpb.OverrideKey{{Rule: "plan-quota", Tenant: "acme"}}}))
	if err, ok := res.(error); !ok || !errors.Is(err, ErrOverrideNotFound) {
		t.Fatalf("second delete: %v, want ErrOverrideNotFound", res)
	}
	if f.st.OverridesVersion() != 3 {
		t.Fatalf("a refused command moved the version to %d", f.st.OverridesVersion())
	}
	// Snapshots keep everything, tombstones included.
	if a, b := dumpState(f.st), dumpState(roundTrip(t, f).st); a != b {
		t.Fatalf("snapshot round trip differs:\n%s\n---\n%s", a, b)
	}
}

func TestOverridesRefusedNameTheField(t *testing.T) {
	f := overridesMachine(t)
	for _, tc := range []struct {
		name string
		o    *allotpb.Override
		want string
	}{
		{"unknown rule", &allotpb.Override{Rule: "nope", Tenant: "a", Limit: 1}, "overrides[0].rule"},
		{"negative limit", &allotpb.Override{Rule: "plan-quota", Tenant: "a", Limit: -5}, "overrides[0].limit"},
		{"no tenant", &allotpb.Override{Rule: "plan-quota", Limit: 5}, "overrides[0].tenant"},
		{"nothing set", &allotpb.Override{Rule: "plan-quota", Tenant: "a"}, "overrides[0].limit"},
		{"negative weight", &allotpb.Override{Rule: "edge", Tenant: "a", Weight: -1}, "overrides[0].weight"},
		{"limit on a global rule", &allotpb.Override{Rule: "edge", Tenant: "a", Limit: 10}, "overrides[0].limit"},
		{"expired", &allotpb.Override{Rule: "plan-quota", Tenant: "a", Limit: 5, ExpiresUnixNano: hour0.Add(-time.Second).UnixNano()}, "overrides[0].expires"},
		{"long tenant", &allotpb.Override{Rule: "plan-quota", Tenant: strings.Repeat("x", rules.MaxNameLen+1), Limit: 5}, "overrides[0].tenant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := putOverrides(t, f, hour0, tc.o)
			err, ok := res.(error)
			if !ok || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", res, tc.want)
			}
			if f.st.OverridesVersion() != 0 || f.st.OverridesCount() != 0 {
				t.Fatal("a refused override changed the state")
			}
		})
	}
	// One bad entry refuses the whole call.
	res := putOverrides(t, f, hour0, &allotpb.Override{Rule: "plan-quota", Tenant: "a", Limit: 5}, &allotpb.Override{Rule: "plan-quota", Tenant: "b", Limit: -1})
	if _, ok := res.(error); !ok || f.st.OverridesCount() != 0 {
		t.Fatalf("a call with one bad entry: %v, %d overrides", res, f.st.OverridesCount())
	}
}

func TestOverridesExpireAndFollowTheirRule(t *testing.T) {
	f := overridesMachine(t)
	putOverrides(t, f, hour0, &allotpb.Override{Rule: "plan-quota", Tenant: "event", Limit: 900, ExpiresUnixNano: hour0.Add(time.Hour).UnixNano()},
		&allotpb.Override{Rule: "edge", Tenant: "acme", Weight: 2})
	f.Apply(entry(t, 0, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: hour0.Add(30 * time.Minute).UnixNano(), AgentTimeoutNano: int64(time.Minute)}))
	if _, ok := f.st.Override("plan-quota", "event"); !ok {
		t.Fatal("expired early")
	}
	f.Apply(entry(t, 0, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: hour0.Add(time.Hour).UnixNano(), AgentTimeoutNano: int64(time.Minute)}))
	if _, ok := f.st.Override("plan-quota", "event"); ok {
		t.Fatal("in force past its expiry")
	}
	// Deleting a rule deletes its overrides.
	f.Apply(entry(t, 0, CmdRules, &fsmpb.RulesCommand{Delete: []string{"edge"}}))
	if _, ok := f.st.Override("edge", "acme"); ok || f.st.OverridesCount() != 0 {
		t.Fatal("an override outlived its rule")
	}
	d := f.st.OverridesSince(1, 100)
	if len(d.GetOverrides()) != 2 || d.GetVersion() != 3 {
		t.Fatalf("since 1: %v, want two tombstones at version 3", d)
	}
}

func TestOverridesPagesAndFloor(t *testing.T) {
	f := overridesMachine(t)
	// Three commands of 4000: pages end between versions.
	for c := range 3 {
		var os []*allotpb.Override
		for i := range 4000 {
			os = append(os, &allotpb.Override{Rule: "plan-quota", Tenant: fmt.Sprintf("t%d-%d", c, i), Limit: int64(i + 1)})
		}
		if _, ok := putOverrides(t, f, hour0, os...).(error); ok {
			t.Fatal("put refused")
		}
	}
	d := f.st.OverridesSince(0, 5000)
	if !d.GetMore() || d.GetVersion() != 2 || len(d.GetOverrides()) != 8000 {
		t.Fatalf("page 1: more %v version %d, %d entries; want more, version 2, 8000", d.GetMore(), d.GetVersion(), len(d.GetOverrides()))
	}
	d = f.st.OverridesSince(d.GetVersion(), 5000)
	if d.GetMore() || d.GetVersion() != 3 || len(d.GetOverrides()) != 4000 {
		t.Fatalf("page 2: %v %d %d", d.GetMore(), d.GetVersion(), len(d.GetOverrides()))
	}
	// Past maxTombstones deletions, the oldest are dropped: a follower
	// from before them starts afresh.
	var keys []*allotpb.OverrideKey
	for c := range 3 {
		for i := range 4000 {
			keys = append(keys, &allotpb.OverrideKey{Rule: "plan-quota", Tenant: fmt.Sprintf("t%d-%d", c, i)})
		}
	}
	var os []*allotpb.Override
	for i := range maxTombstones {
		os = append(os, &allotpb.Override{Rule: "plan-quota", Tenant: fmt.Sprintf("x%d", i), Limit: 1})
		if len(os) == MaxOverridesPerCommand {
			putOverrides(t, f, hour0, os...)
			os = nil
		}
	}
	for i := 0; i < len(keys); i += MaxOverridesPerCommand {
		f.Apply(entry(t, 0, CmdOverrides, &fsmpb.OverridesCommand{Delete: keys[i:min(i+MaxOverridesPerCommand, len(keys))]}))
	}
	var del []*allotpb.OverrideKey
	for i := range MaxOverridesPerCommand {
		del = append(del, &allotpb.OverrideKey{Rule: "plan-quota", Tenant: fmt.Sprintf("x%d", i)})
	}
	for i := 0; i < 9; i++ {
		f.Apply(entry(t, 0, CmdOverrides, &fsmpb.OverridesCommand{Delete: del[:0]}))
	}
	for j := range 9 {
		var ks []*allotpb.OverrideKey
		for i := range MaxOverridesPerCommand {
			ks = append(ks, &allotpb.OverrideKey{Rule: "plan-quota", Tenant: fmt.Sprintf("x%d", j*MaxOverridesPerCommand+i)})
		}
		if err, ok := f.Apply(entry(t, 0, CmdOverrides, &fsmpb.OverridesCommand{Delete: ks})).(error); ok {
			t.Fatal(err)
		}
	}
	if f.st.ov.dead > maxTombstones || f.st.ov.floor == 0 {
		t.Fatalf("%d tombstones, floor %d", f.st.ov.dead, f.st.ov.floor)
	}
	d = f.st.OverridesSince(1, 1<<20)
	if !d.GetFull() || len(d.GetOverrides()) != f.st.OverridesCount() {
		t.Fatalf("below the floor: full %v, %d entries for %d in force", d.GetFull(), len(d.GetOverrides()), f.st.OverridesCount())
	}
	for _, o := range d.GetOverrides() {
		if o.GetDeleted() {
			t.Fatal("a full delta holds a tombstone")
		}
	}
}

func TestOverridesMirror(t *testing.T) {
	home, group := overridesMachine(t), overridesMachine(t)
	putOverrides(t, home, hour0, &allotpb.Override{Rule: "plan-quota", Tenant: "acme", Limit: 500})
	putOverrides(t, home, hour0, &allotpb.Override{Rule: "plan-quota", Tenant: "globex", Limit: 50})
	home.Apply(entry(t, 0, CmdOverrides, &fsmpb.OverridesCommand{Delete: []*allotpb.OverrideKey{{Rule: "plan-quota", Tenant: "globex"}}}))
	d := home.st.OverridesSince(group.st.MirroredOverridesVersion(), 100)
	group.Apply(entry(t, 0, CmdOverrides, &fsmpb.OverridesCommand{Mirror: true, Full: d.GetFull(), Put: d.GetOverrides(), MirrorVersion: d.GetVersion(), NowUnixNano: hour0.UnixNano()}))
	if o, ok := group.st.Override("plan-quota", "acme"); !ok || o.GetLimit() != 500 {
		t.Fatalf("mirror: %v %v", o, ok)
	}
	if _, ok := group.st.Override("plan-quota", "globex"); ok {
		t.Fatal("the mirror holds a deleted override")
	}
	if group.st.MirroredOverridesVersion() != 3 || home.st.OverridesSince(3, 10) != nil {
		t.Fatalf("mirror at home version %d", group.st.MirroredOverridesVersion())
	}
}
