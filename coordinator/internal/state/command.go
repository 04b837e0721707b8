package state

import (
	"fmt"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"google.golang.org/protobuf/proto"
)

// Command is the first byte of every log entry; a protobuf payload
// follows. A type with the Ignorable bit set may be skipped by a node too
// old to know it; any other unknown type stops the node, because applying
// the log partially would let replicas diverge.
type Command uint8

// The command types. Their numbers are in every existing log: never
// renumber one.
const (
	CmdReports  Command = 1
	CmdRules    Command = 2
	CmdMember   Command = 3
	CmdEpoch    Command = 4
	CmdMaintain Command = 5
	CmdSettings Command = 6
	// CmdGrants is proposed with the ignorable bit: a member too old to
	// know it skips it and only loses the bill's granted shares.
	CmdGrants Command = 7
	// CmdExported is proposed with the ignorable bit: a member too old to
	// know it keeps lines the sink already holds, in memory only.
	CmdExported Command = 8
	// CmdSlots and CmdShardMap change what a shard group owns and the
	// region's shard map. Never ignorable: a member that skipped one
	// would apply usage its group does not own.
	CmdSlots    Command = 9
	CmdShardMap Command = 10
	// CmdOverrides changes per-tenant overrides. Never ignorable: a
	// member that skipped one would grant leases by other limits.
	CmdOverrides Command = 11
	// CmdAudit records an audit entry no other command carries (audit.go).
	// Proposed with the ignorable bit: a member too old to know it only
	// lacks the entry, as it lacks the ones other commands carry.
	CmdAudit Command = 12
	// CmdReset records a key reset. Never ignorable: a member that
	// skipped one would number the resets apart, and its agents would
	// miss the reset or take another in its place.
	CmdReset Command = 13
	// CmdNoticesDelivered marks threshold notices delivered (notices.go).
	// Proposed with the ignorable bit: a member too old to know it keeps
	// no notices at all.
	CmdNoticesDelivered Command = 14

	Ignorable Command = 0x80
)

// Commands lists every command type this version knows, in the order of
// their numbers.
var Commands = func() []Command {
	out := make([]Command, len(commands))
	for i, c := range commands {
		out[i] = c.t
	}
	return out
}()

func (t Command) String() string {
	if c := commandOf(t); c != nil {
		return c.name
	}
	return fmt.Sprintf("command(%d)", uint8(t))
}

// Encode lays out a log entry: the type byte, then the payload.
func Encode(t Command, m proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{}.MarshalAppend([]byte{byte(t)}, m)
	if err != nil {
		return nil, fmt.Errorf("coordinator: encoding %v command: %w", t, err)
	}
	return b, nil
}

// command is one command type as this version knows it: its number, the
// name metrics and traces give it, and its handler, which decodes into
// msg's message and applies it to the state.
type command struct {
	t     Command
	name  string
	msg   func() proto.Message
	apply func(*State, proto.Message) any
}

// handle makes a command's entry from the State method that applies it:
// the message type is the method's argument, and what the proposer is
// told its result.
func handle[T any, M interface {
	*T
	proto.Message
}, R any](t Command, name string, apply func(*State, M) R) command {
	return command{
		t: t, name: name,
		msg:   func() proto.Message { return M(new(T)) },
		apply: func(s *State, m proto.Message) any { return apply(s, m.(M)) },
	}
}

// effect is handle for a command the proposer is told nothing of.
func effect[T any, M interface {
	*T
	proto.Message
}](t Command, name string, apply func(*State, M)) command {
	return handle(t, name, func(s *State, m M) any { apply(s, m); return nil })
}

// commands is every command type, each registered once here: Commands,
// String, Message and Apply all read this table. The names are metric
// labels and trace attributes already in dashboards: never rename one.
var commands = [...]command{
	handle(CmdReports, "reports", (*State).applyReports),
	handle(CmdRules, "rules", func(s *State, m *fsmpb.RulesCommand) any {
		if err := s.applyRules(m); err != nil {
			return err
		}
		return s.rules
	}),
	effect(CmdMember, "member", (*State).applyMember),
	handle(CmdEpoch, "epoch", (*State).applyEpoch),
	effect(CmdMaintain, "maintain", (*State).maintain),
	effect(CmdSettings, "settings", (*State).applySettings),
	effect(CmdGrants, "grants", (*State).applyGrants),
	effect(CmdExported, "exported", (*State).applyExported),
	handle(CmdSlots, "slots", (*State).applySlots),
	handle(CmdShardMap, "shard_map", (*State).applyShardMap),
	handle(CmdOverrides, "overrides", (*State).applyOverrides),
	effect(CmdAudit, "audit", (*State).applyAudit),
	handle(CmdReset, "reset", (*State).applyReset),
	effect(CmdNoticesDelivered, "notices_delivered", (*State).applyNoticesDelivered),
}

// commandOf is the entry of command type t, the ignorable bit aside, or
// nil for a type this version does not know. The table is in the order
// of the numbers, from 1, so the number is the index; TestCommandTable
// holds it so.
func commandOf(t Command) *command {
	i := int(t&^Ignorable) - 1
	if i < 0 || i >= len(commands) {
		return nil
	}
	return &commands[i]
}

// Message returns an empty message of the type command t carries (the
// ignorable bit aside), or false for a type this version does not know.
func Message(t Command) (proto.Message, bool) {
	c := commandOf(t)
	if c == nil {
		return nil, false
	}
	return c.msg(), true
}

// Apply applies command t, carrying m (of the type Message gives), and
// returns what the proposer is told: a *ReportsResult for reports, the
// new *rules.Set or the error that refused it for rules, the new epoch
// for an epoch, nil otherwise. A type this version does not know changes
// nothing and returns nil.
func (s *State) Apply(t Command, m proto.Message) any {
	s.recorded = ""
	c := commandOf(t)
	if c == nil {
		return nil
	}
	return c.apply(s, m)
}
