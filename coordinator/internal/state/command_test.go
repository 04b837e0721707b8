package state

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestCommandTable holds the command table to the numbers already in
// every existing log: each type keeps its number, its name (a metric
// label) and the message it decodes, and the table stays indexed by
// number, as commandOf reads it.
func TestCommandTable(t *testing.T) {
	want := []struct {
		t    Command
		name string
		msg  string
	}{
		{1, "reports", "allot.fsm.v1.ReportsCommand"},
		{2, "rules", "allot.fsm.v1.RulesCommand"},
		{3, "member", "allot.fsm.v1.MemberCommand"},
		{4, "epoch", "allot.fsm.v1.EpochCommand"},
		{5, "maintain", "allot.fsm.v1.MaintainCommand"},
		{6, "settings", "allot.fsm.v1.SettingsCommand"},
		{7, "grants", "allot.fsm.v1.GrantsCommand"},
		{8, "exported", "allot.fsm.v1.ExportedCommand"},
		{9, "slots", "allot.fsm.v1.SlotsCommand"},
		{10, "shard_map", "allot.fsm.v1.ShardMapCommand"},
		{11, "overrides", "allot.fsm.v1.OverridesCommand"},
		{12, "audit", "allot.fsm.v1.AuditCommand"},
		{13, "reset", "allot.fsm.v1.ResetCommand"},
		{14, "notices_delivered", "allot.fsm.v1.NoticesDeliveredCommand"},
	}
	if len(Commands) != len(want) {
		t.Fatalf("Commands lists %d types, want %d: %v", len(Commands), len(want), Commands)
	}
	for i, w := range want {
		if Commands[i] != w.t {
			t.Errorf("Commands[%d] = %d, want %d", i, Commands[i], w.t)
		}
		for _, ct := range []Command{w.t, w.t | Ignorable} {
			if got := ct.String(); got != w.name {
				t.Errorf("command %d: name %q, want %q", ct, got, w.name)
			}
			m, ok := Message(ct)
			if !ok {
				t.Errorf("command %d: no message", ct)
				continue
			}
			if got := string(proto.MessageName(m)); got != w.msg {
				t.Errorf("command %d (%s) decodes %s, want %s", ct, w.name, got, w.msg)
			}
		}
	}
	for _, ct := range []Command{0, 15, 0x7f, Ignorable, Ignorable | 15} {
		if _, ok := Message(ct); ok {
			t.Errorf("command %d: a message for a type this version does not know", ct)
		}
		if got := New().Apply(ct, nil); got != nil {
			t.Errorf("command %d: Apply returned %v for a type this version does not know", ct, got)
		}
	}
	if got, want := Command(15).String(), "command(15)"; got != want {
		t.Errorf("unknown type's name %q, want %q", got, want)
	}
}
