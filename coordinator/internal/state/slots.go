package state

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
)

// A slot's state at this group.
const (
	slotOwned  byte = 0
	slotFrozen byte = 1
	slotAbsent byte = 2
)

// slotTable is what a group owns: never changed once made, replaced
// whole by each step (steps are rare), so a snapshot shares it.
type slotTable struct {
	group string
	state [shard.Slots]byte
	// frozenBy is the move each frozen slot is frozen for.
	frozenBy map[shard.Slot]uint64
	// moves are the steps this group took, by move: the last op of each,
	// which makes every step idempotent and an acquire and an abort of
	// one move exclusive.
	moves map[uint64]*fsmpb.MoveOutcome
	// forgotten: the moves with a lower ID are finished at the home
	// group, which said so with a step (finished_below); their outcomes
	// are dropped from moves, and any step of them is refused. The mover
	// sends steps of moves under way alone, so it never meets the
	// refusal; a deposed leader's late step does, and changes nothing.
	forgotten uint64
}

func (t *slotTable) clone() *slotTable {
	c := &slotTable{group: t.group, state: t.state, forgotten: t.forgotten, frozenBy: make(map[shard.Slot]uint64, len(t.frozenBy)), moves: make(map[uint64]*fsmpb.MoveOutcome, len(t.moves)+1)}
	for k, v := range t.frozenBy {
		c.frozenBy[k] = v
	}
	for k, v := range t.moves {
		c.moves[k] = v
	}
	return c
}

// Owns reports whether this group takes usage for the slot now.
func (s *State) Owns(sl shard.Slot) bool { return s.Owner()(sl) }

// Group is the shard group this state belongs to, "" until a step named it.
func (s *State) Group() string {
	if s.slots == nil {
		return ""
	}
	return s.slots.group
}

// OwnedSlots counts the slots this group owns.
func (s *State) OwnedSlots() int {
	if s.slots == nil {
		return shard.Slots
	}
	n := 0
	for _, st := range s.slots.state {
		if st == slotOwned {
			n++
		}
	}
	return n
}

// RememberedMoves counts the moves whose steps the slot table remembers:
// those from the oldest move under way in the region on (forget).
func (s *State) RememberedMoves() int {
	if s.slots == nil {
		return 0
	}
	return len(s.slots.moves)
}

// unowned returns the slots of a batch's counts this group does not own,
// in order, or nil when it owns them all.
func (s *State) unowned(b *allotpb.UsageBatch) []uint32 {
	if s.slots == nil {
		return nil
	}
	var out []uint32
	for _, c := range b.GetCounts() {
		if sl := shard.Of(c.GetTenant()); s.slots.state[sl] != slotOwned {
			out = append(out, uint32(sl))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// applySlots applies one step of a move. A step the state cannot take
// (a slot in the wrong state, an acquire after an abort, any step before
// a new group's start) changes nothing and says why; a step taken before
// is done again, changing nothing.
func (s *State) applySlots(cmd *fsmpb.SlotsCommand) *fsmpb.SlotsResult {
	refuse := func(format string, a ...any) *fsmpb.SlotsResult {
		return &fsmpb.SlotsResult{Refused: fmt.Sprintf(format, a...), Owned: uint32(s.OwnedSlots())}
	}
	first, last := cmd.GetFirst(), cmd.GetLast()
	if cmd.GetGroup() == "" || shard.ValidGroupID(cmd.GetGroup()) != nil {
		return refuse("the step names no valid group")
	}
	if cmd.GetOp() != fsmpb.SlotsCommand_EMPTY && (first > last || last >= shard.Slots) {
		return refuse("slots %d..%d are not a range of 0..%d", first, last, shard.Slots-1)
	}
	// A state with no table yet is one of two things: its region's home
	// group, which owns every slot until it gives some away (it holds the
	// map: a move is planned in its log before its first step), or a
	// group added to the region whose first leader has not committed its
	// empty table yet. The second owns nothing, so a step there before
	// that start (an abort, say, sent while it was coming up) must not
	// make a table, which would own every slot for good.
	home := s.shardMap != nil && s.shardMap.Home == cmd.GetGroup()
	t := s.slots
	switch {
	case t == nil && cmd.GetOp() == fsmpb.SlotsCommand_EMPTY && home:
		return refuse("group %q is its region's home group: it owns every slot it has not moved away, and never starts empty", cmd.GetGroup())
	case t == nil && cmd.GetOp() != fsmpb.SlotsCommand_EMPTY && !home:
		return refuse("group %q has not started: its first leader has not committed its empty slot table, and it takes a move's steps only after that; retry", cmd.GetGroup())
	case t == nil:
		t = &slotTable{group: cmd.GetGroup(), frozenBy: map[shard.Slot]uint64{}, moves: map[uint64]*fsmpb.MoveOutcome{}}
	case t.group != cmd.GetGroup():
		return refuse("this is group %q, not %q", t.group, cmd.GetGroup())
	default:
		t = t.clone()
	}
	id := cmd.GetMoveId()
	if floor := max(t.forgotten, cmd.GetFinishedBelow()); cmd.GetOp() != fsmpb.SlotsCommand_EMPTY && id < floor {
		return refuse("move %d is finished at the home group, and this group has forgotten its steps of it", id)
	}
	prev := t.moves[id]
	each := func(fn func(shard.Slot)) {
		for sl := first; sl <= last; sl++ {
			fn(shard.Slot(sl))
		}
	}
	all := func(want byte, by uint64) bool {
		ok := true
		each(func(sl shard.Slot) { ok = ok && t.state[sl] == want && (by == 0 || t.frozenBy[sl] == by) })
		return ok
	}
	switch cmd.GetOp() {
	case fsmpb.SlotsCommand_EMPTY:
		if s.slots != nil {
			return &fsmpb.SlotsResult{Done: true, Owned: uint32(s.OwnedSlots())}
		}
		for i := range t.state {
			t.state[i] = slotAbsent
		}
		s.slots = t
		return &fsmpb.SlotsResult{Done: true}
	case fsmpb.SlotsCommand_FREEZE:
		switch {
		case prev.GetOp() == fsmpb.SlotsCommand_FREEZE || prev.GetOp() == fsmpb.SlotsCommand_RELEASE:
			return &fsmpb.SlotsResult{Done: true, Owned: uint32(s.OwnedSlots())}
		case prev != nil:
			return refuse("move %d is past freezing here (%v)", id, prev.GetOp())
		case !all(slotOwned, 0):
			return refuse("group %q does not own every slot of %d..%d", t.group, first, last)
		}
		each(func(sl shard.Slot) { t.state[sl], t.frozenBy[sl] = slotFrozen, id })
	case fsmpb.SlotsCommand_UNFREEZE:
		switch {
		case prev.GetOp() == fsmpb.SlotsCommand_UNFREEZE:
			return &fsmpb.SlotsResult{Done: true, Owned: uint32(s.OwnedSlots())}
		case prev.GetOp() != fsmpb.SlotsCommand_FREEZE || !all(slotFrozen, id):
			return refuse("move %d has not frozen slots %d..%d here", id, first, last)
		}
		each(func(sl shard.Slot) { t.state[sl] = slotOwned; delete(t.frozenBy, sl) })
	case fsmpb.SlotsCommand_RELEASE:
		switch {
		case prev.GetOp() == fsmpb.SlotsCommand_RELEASE:
			return &fsmpb.SlotsResult{Done: true, Owned: uint32(s.OwnedSlots())}
		case prev.GetOp() != fsmpb.SlotsCommand_FREEZE || !all(slotFrozen, id):
			return refuse("move %d has not frozen slots %d..%d here", id, first, last)
		}
		each(func(sl shard.Slot) { t.state[sl] = slotAbsent; delete(t.frozenBy, sl) })
	case fsmpb.SlotsCommand_ACQUIRE:
		switch {
		case prev.GetOp() == fsmpb.SlotsCommand_ACQUIRE:
			return &fsmpb.SlotsResult{Done: true, Owned: uint32(s.OwnedSlots())}
		case prev.GetOp() == fsmpb.SlotsCommand_ABORT:
			return refuse("move %d was aborted here", id)
		case !all(slotAbsent, 0):
			return refuse("group %q already holds some slot of %d..%d", t.group, first, last)
		}
		each(func(sl shard.Slot) { t.state[sl] = slotOwned })
	case fsmpb.SlotsCommand_ABORT:
		switch {
		case prev.GetOp() == fsmpb.SlotsCommand_ABORT:
			return &fsmpb.SlotsResult{Done: true, Owned: uint32(s.OwnedSlots())}
		case prev.GetOp() == fsmpb.SlotsCommand_ACQUIRE:
			return refuse("move %d has acquired its slots here", id)
		}
	default:
		return refuse("unknown step %v", cmd.GetOp())
	}
	t.moves[id] = &fsmpb.MoveOutcome{MoveId: id, Op: cmd.GetOp(), First: first, Last: last, Peer: cmd.GetPeer(), AtUnixNano: cmd.GetProposedUnixNano()}
	t.forget(cmd.GetFinishedBelow())
	s.slots = t
	return &fsmpb.SlotsResult{Done: true, Owned: uint32(s.OwnedSlots())}
}

// forget drops the outcomes of the moves below floor, finished at the
// home group: what the table keeps is bounded by the moves from the
// oldest one under way in the region on. A move's frozen slots are
// unfrozen or released before it finishes, so no slot is frozen by a
// move forgotten.
func (t *slotTable) forget(floor uint64) {
	if floor <= t.forgotten {
		return
	}
	t.forgotten = floor
	for id := range t.moves {
		if id < floor {
			delete(t.moves, id)
		}
	}
}

// slotsRecord is the snapshot record of the table, nil when the group
// owns every slot and never took a step.
func (s *State) slotsRecord() *fsmpb.SlotsRecord {
	t := s.slots
	if t == nil {
		return nil
	}
	rec := &fsmpb.SlotsRecord{Group: t.group, Slots: slices.Clone(t.state[:]), ForgottenBelow: t.forgotten}
	for _, o := range t.moves {
		rec.Moves = append(rec.Moves, o)
	}
	slices.SortFunc(rec.Moves, func(a, b *fsmpb.MoveOutcome) int { return cmp.Compare(a.GetMoveId(), b.GetMoveId()) })
	return rec
}

// restoreSlots reads the table back from a snapshot.
func (s *State) restoreSlots(rec *fsmpb.SlotsRecord) error {
	if len(rec.GetSlots()) != shard.Slots {
		return fmt.Errorf("slots record: %d slots, this version uses %d", len(rec.GetSlots()), shard.Slots)
	}
	t := &slotTable{group: rec.GetGroup(), forgotten: rec.GetForgottenBelow(), frozenBy: map[shard.Slot]uint64{}, moves: map[uint64]*fsmpb.MoveOutcome{}}
	copy(t.state[:], rec.GetSlots())
	for _, o := range rec.GetMoves() {
		t.moves[o.GetMoveId()] = o
	}
	for i, st := range t.state {
		switch st {
		case slotOwned, slotAbsent:
		case slotFrozen:
			// The move that froze it is the one whose last step here is a
			// freeze covering it.
			for _, o := range rec.GetMoves() {
				if o.GetOp() == fsmpb.SlotsCommand_FREEZE && uint32(i) >= o.GetFirst() && uint32(i) <= o.GetLast() {
					t.frozenBy[shard.Slot(i)] = o.GetMoveId()
				}
			}
		default:
			return fmt.Errorf("slots record: slot %d in unknown state %d", i, st)
		}
	}
	s.slots = t
	return nil
}

// Owner returns whether this group owns a slot now, as a function that
// may be called after the state's lock is released: it reads the table
// of the moment it was made, which is never changed.
func (s *State) Owner() func(shard.Slot) bool {
	t := s.slots
	if t == nil {
		return func(shard.Slot) bool { return true }
	}
	return func(sl shard.Slot) bool { return t.state[sl] == slotOwned }
}
