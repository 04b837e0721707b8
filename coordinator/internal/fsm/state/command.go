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

	Ignorable Command = 0x80
)

// Commands lists every command type this version knows.
var Commands = []Command{CmdReports, CmdRules, CmdMember, CmdEpoch, CmdMaintain, CmdSettings, CmdGrants, CmdExported, CmdSlots, CmdShardMap, CmdOverrides, CmdAudit, CmdReset}

func (t Command) String() string {
	switch t &^ Ignorable {
	case CmdReports:
		return "reports"
	case CmdRules:
		return "rules"
	case CmdMember:
		return "member"
	case CmdEpoch:
		return "epoch"
	case CmdMaintain:
		return "maintain"
	case CmdSettings:
		return "settings"
	case CmdGrants:
		return "grants"
	case CmdExported:
		return "exported"
	case CmdSlots:
		return "slots"
	case CmdShardMap:
		return "shard_map"
	case CmdOverrides:
		return "overrides"
	case CmdAudit:
		return "audit"
	case CmdReset:
		return "reset"
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

// handler applies one decoded command to the state.
type handler struct {
	msg   func() proto.Message
	apply func(*State, proto.Message) any
}

// handlers is the table of command types, each the same shape: decode,
// apply, return.
var handlers = map[Command]handler{
	CmdReports: {
		msg:   func() proto.Message { return &fsmpb.ReportsCommand{} },
		apply: func(s *State, m proto.Message) any { return s.applyReports(m.(*fsmpb.ReportsCommand)) },
	},
	CmdRules: {
		msg: func() proto.Message { return &fsmpb.RulesCommand{} },
		apply: func(s *State, m proto.Message) any {
			if err := s.applyRules(m.(*fsmpb.RulesCommand)); err != nil {
				return err
			}
			return s.rules
		},
	},
	CmdMember: {
		msg:   func() proto.Message { return &fsmpb.MemberCommand{} },
		apply: func(s *State, m proto.Message) any { s.applyMember(m.(*fsmpb.MemberCommand)); return nil },
	},
	CmdEpoch: {
		msg:   func() proto.Message { return &fsmpb.EpochCommand{} },
		apply: func(s *State, m proto.Message) any { return s.applyEpoch(m.(*fsmpb.EpochCommand)) },
	},
	CmdMaintain: {
		msg:   func() proto.Message { return &fsmpb.MaintainCommand{} },
		apply: func(s *State, m proto.Message) any { s.maintain(m.(*fsmpb.MaintainCommand)); return nil },
	},
	CmdSettings: {
		msg:   func() proto.Message { return &fsmpb.SettingsCommand{} },
		apply: func(s *State, m proto.Message) any { s.applySettings(m.(*fsmpb.SettingsCommand)); return nil },
	},
	CmdGrants: {
		msg:   func() proto.Message { return &fsmpb.GrantsCommand{} },
		apply: func(s *State, m proto.Message) any { s.applyGrants(m.(*fsmpb.GrantsCommand)); return nil },
	},
	CmdExported: {
		msg:   func() proto.Message { return &fsmpb.ExportedCommand{} },
		apply: func(s *State, m proto.Message) any { s.applyExported(m.(*fsmpb.ExportedCommand)); return nil },
	},
	CmdSlots: {
		msg:   func() proto.Message { return &fsmpb.SlotsCommand{} },
		apply: func(s *State, m proto.Message) any { return s.applySlots(m.(*fsmpb.SlotsCommand)) },
	},
	CmdShardMap: {
		msg:   func() proto.Message { return &fsmpb.ShardMapCommand{} },
		apply: func(s *State, m proto.Message) any { return s.applyShardMap(m.(*fsmpb.ShardMapCommand)) },
	},
	CmdOverrides: {
		msg:   func() proto.Message { return &fsmpb.OverridesCommand{} },
		apply: func(s *State, m proto.Message) any { return s.applyOverrides(m.(*fsmpb.OverridesCommand)) },
	},
	CmdAudit: {
		msg:   func() proto.Message { return &fsmpb.AuditCommand{} },
		apply: func(s *State, m proto.Message) any { s.applyAudit(m.(*fsmpb.AuditCommand)); return nil },
	},
	CmdReset: {
		msg:   func() proto.Message { return &fsmpb.ResetCommand{} },
		apply: func(s *State, m proto.Message) any { return s.applyReset(m.(*fsmpb.ResetCommand)) },
	},
}

// Message returns an empty message of the type command t carries (the
// ignorable bit aside), or false for a type this version does not know.
func Message(t Command) (proto.Message, bool) {
	h, ok := handlers[t&^Ignorable]
	if !ok {
		return nil, false
	}
	return h.msg(), true
}

// Apply applies command t, carrying m (of the type Message gives), and
// returns what the proposer is told: a *ReportsResult for reports, the
// new *rules.Set or the error that refused it for rules, the new epoch
// for an epoch, nil otherwise. A type this version does not know changes
// nothing and returns nil.
func (s *State) Apply(t Command, m proto.Message) any {
	s.recorded = ""
	h, ok := handlers[t&^Ignorable]
	if !ok {
		return nil
	}
	return h.apply(s, m)
}
