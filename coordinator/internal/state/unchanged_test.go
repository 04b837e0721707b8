package state

import (
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestChangedOverrides: only an override that differs from the one in
// force (limit, weight, cycle or expiry, to the nanosecond), or that has none,
// changes anything; the leader proposes only those.
func TestChangedOverrides(t *testing.T) {
	f := overridesMachine(t)
	expires := hour0.Add(72*time.Hour + 123456789).UnixNano()
	putOverrides(t, f, hour0, &allotpb.Override{Rule: "plan-quota", Tenant: "acme", Limit: 500, ExpiresUnixNano: expires},
		&allotpb.Override{Rule: "edge", Tenant: "acme", Weight: 4})
	for _, tt := range []struct {
		name    string
		o       *allotpb.Override
		changed bool
	}{
		{"the same", &allotpb.Override{Rule: "plan-quota", Tenant: "acme", Limit: 500, ExpiresUnixNano: expires}, false},
		{"the same weight", &allotpb.Override{Rule: "edge", Tenant: "acme", Weight: 4}, false},
		{"another limit", &allotpb.Override{Rule: "plan-quota", Tenant: "acme", Limit: 501, ExpiresUnixNano: expires}, true},
		{"the expiry cut to the second", &allotpb.Override{Rule: "plan-quota", Tenant: "acme", Limit: 500, ExpiresUnixNano: expires - 123456789}, true},
		{"no expiry", &allotpb.Override{Rule: "plan-quota", Tenant: "acme", Limit: 500}, true},
		{"a weight as well", &allotpb.Override{Rule: "edge", Tenant: "acme", Weight: 4, Limit: 1}, true},
		{"a new tenant", &allotpb.Override{Rule: "plan-quota", Tenant: "globex", Limit: 500}, true},
		{"a cycle anchor as well", &allotpb.Override{Rule: "plan-quota", Tenant: "acme", Limit: 500, ExpiresUnixNano: expires, Cycle: &allotpb.Anchor{AnchorDay: 17}}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := f.st.ChangedOverrides([]*allotpb.Override{tt.o})
			if changed := len(got) == 1; changed != tt.changed || len(got) > 1 {
				t.Errorf("ChangedOverrides(%v) = %v; changed %v, want %v", tt.o, got, changed, tt.changed)
			}
		})
	}
}

// TestRulesUnchanged: a rules command whose every rule equals the one of
// its name, and that deletes none, changes nothing; one that adds,
// changes or (replacing all) drops a rule does.
func TestRulesUnchanged(t *testing.T) {
	f := overridesMachine(t)
	// The rules overridesMachine put, as they were put.
	quota := &allotpb.Rule{Name: "plan-quota", Scope: "tenant", Algorithm: "gcra", Limit: 100, Period: durationpb.New(time.Second), Intent: "quota"}
	edge := &allotpb.Rule{Name: "edge", Scope: "global", Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second), Intent: "capacity"}
	raised := proto.Clone(quota).(*allotpb.Rule)
	raised.Limit = 200
	other := proto.Clone(quota).(*allotpb.Rule)
	other.Name = "other"
	for _, tt := range []struct {
		name      string
		cmd       *fsmpb.RulesCommand
		unchanged bool
	}{
		{"both again", &fsmpb.RulesCommand{Put: []*allotpb.Rule{quota, edge}}, true},
		{"one of them again", &fsmpb.RulesCommand{Put: []*allotpb.Rule{quota}}, true},
		{"both again, replacing all", &fsmpb.RulesCommand{Put: []*allotpb.Rule{edge, quota}, ReplaceAll: true}, true},
		{"one, replacing all", &fsmpb.RulesCommand{Put: []*allotpb.Rule{quota}, ReplaceAll: true}, false},
		{"a changed limit", &fsmpb.RulesCommand{Put: []*allotpb.Rule{raised}}, false},
		{"a new rule", &fsmpb.RulesCommand{Put: []*allotpb.Rule{quota, other}}, false},
		{"a delete", &fsmpb.RulesCommand{Delete: []string{"edge"}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := f.st.RulesUnchanged(tt.cmd); got != tt.unchanged {
				t.Errorf("RulesUnchanged = %v, want %v", got, tt.unchanged)
			}
		})
	}
}
