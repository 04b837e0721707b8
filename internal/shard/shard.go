package shard

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	allotpb "github.com/allot-io/allot/proto"
)

// Slots is how many slots a region's tenants are spread over. It is fixed
// for the life of a region: every agent and group must agree on it.
const Slots = 16384

// Slot is one of the Slots slots.
type Slot uint16

// Of is the slot of a tenant: FNV-1a 64 of its bytes, modulo Slots.
func Of(tenant string) Slot {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(tenant); i++ {
		h ^= uint64(tenant[i])
		h *= prime
	}
	return Slot(h % Slots)
}

// DefaultGroup is the group a cluster is when nobody named one: a region
// started as a single cluster is the home group "main" owning every slot.
const DefaultGroup = "main"

// ErrInvalid is wrapped by every refusal of a map or a move that breaks
// the rules below.
var ErrInvalid = errors.New("invalid shard map")

// Map sends every slot to a group. The zero Map is not valid; Single
// gives a region's first map.
type Map struct {
	Version uint64
	// Home holds the map and the rules; Global divides global rules.
	Home, Global string
	// Groups are the groups by ID, each with its members' gRPC addresses.
	Groups map[string][]string
	// owner is each slot's group.
	owner [Slots]string
	// Moves are the moves recorded, in order of their IDs.
	Moves []*allotpb.SlotMove
	// Pinned slots are left out of range moves.
	Pinned map[Slot]bool
}

// Single is the map of a region that is one group, home, owning every
// slot, at version 1.
func Single(home string, coordinators []string) *Map {
	m := &Map{Version: 1, Home: home, Global: home, Groups: map[string][]string{home: slices.Clone(coordinators)}}
	for i := range m.owner {
		m.owner[i] = home
	}
	return m
}

// Owner is the group a slot is routed to.
func (m *Map) Owner(s Slot) string { return m.owner[s] }

// Route is the group a tenant's usage and demand go to.
func (m *Map) Route(tenant string) string { return m.owner[Of(tenant)] }

// Assign routes the slots first..last to group, without a version bump:
// the caller (the home group's state) numbers versions.
func (m *Map) Assign(first, last Slot, group string) error {
	if first > last || int(last) >= Slots {
		return fmt.Errorf("%w: slots %d..%d are not a range of 0..%d", ErrInvalid, first, last, Slots-1)
	}
	if _, ok := m.Groups[group]; !ok {
		return fmt.Errorf("%w: no group %q", ErrInvalid, group)
	}
	for s := int(first); s <= int(last); s++ {
		m.owner[s] = group
	}
	return nil
}

// Count is how many slots each group owns.
func (m *Map) Count() map[string]int {
	n := make(map[string]int, len(m.Groups))
	for g := range m.Groups {
		n[g] = 0
	}
	for _, g := range m.owner {
		n[g]++
	}
	return n
}

// GroupIDs are the groups in order.
func (m *Map) GroupIDs() []string {
	ids := make([]string, 0, len(m.Groups))
	for g := range m.Groups {
		ids = append(ids, g)
	}
	slices.Sort(ids)
	return ids
}

// Clone is an independent copy.
func (m *Map) Clone() *Map {
	c := *m
	c.Groups = make(map[string][]string, len(m.Groups))
	for g, a := range m.Groups {
		c.Groups[g] = slices.Clone(a)
	}
	c.Moves = slices.Clone(m.Moves)
	c.Pinned = make(map[Slot]bool, len(m.Pinned))
	for s := range m.Pinned {
		c.Pinned[s] = true
	}
	return &c
}

// Ranges are the map's slots as ranges of one owner, in order.
func (m *Map) Ranges() []*allotpb.SlotRange {
	var out []*allotpb.SlotRange
	for s := 0; s < Slots; s++ {
		if n := len(out); n > 0 && out[n-1].Group == m.owner[s] {
			out[n-1].Last = uint32(s)
			continue
		}
		out = append(out, &allotpb.SlotRange{First: uint32(s), Last: uint32(s), Group: m.owner[s]})
	}
	return out
}

// Proto is the map's wire form.
func (m *Map) Proto() *allotpb.ShardMap {
	pm := &allotpb.ShardMap{Version: m.Version, Slots: Slots, Home: m.Home, Global: m.Global, Ranges: m.Ranges(), Moves: m.Moves}
	for _, g := range m.GroupIDs() {
		pm.Groups = append(pm.Groups, &allotpb.ShardGroup{Id: g, Coordinators: slices.Clone(m.Groups[g])})
	}
	for s := range m.Pinned {
		pm.Pinned = append(pm.Pinned, uint32(s))
	}
	slices.Sort(pm.Pinned)
	return pm
}

// FromProto reads a map's wire form, refusing one that does not route
// every slot to a known group exactly once.
func FromProto(pm *allotpb.ShardMap) (*Map, error) {
	if pm.GetSlots() != Slots {
		return nil, fmt.Errorf("%w: %d slots, this version uses %d", ErrInvalid, pm.GetSlots(), Slots)
	}
	m := &Map{Version: pm.GetVersion(), Home: pm.GetHome(), Global: pm.GetGlobal(), Groups: map[string][]string{}, Moves: pm.GetMoves()}
	for i, g := range pm.GetGroups() {
		if err := ValidGroupID(g.GetId()); err != nil {
			return nil, fmt.Errorf("%w: groups[%d]: %v", ErrInvalid, i, err)
		}
		if _, dup := m.Groups[g.GetId()]; dup {
			return nil, fmt.Errorf("%w: group %q listed twice", ErrInvalid, g.GetId())
		}
		m.Groups[g.GetId()] = slices.Clone(g.GetCoordinators())
	}
	for _, g := range []string{m.Home, m.Global} {
		if _, ok := m.Groups[g]; !ok {
			return nil, fmt.Errorf("%w: home or global group %q is not listed", ErrInvalid, g)
		}
	}
	next := uint32(0)
	for i, r := range pm.GetRanges() {
		if r.GetFirst() != next || r.GetLast() < r.GetFirst() || r.GetLast() >= Slots {
			return nil, fmt.Errorf("%w: ranges[%d] is %d..%d, expected one starting at %d", ErrInvalid, i, r.GetFirst(), r.GetLast(), next)
		}
		if err := m.Assign(Slot(r.GetFirst()), Slot(r.GetLast()), r.GetGroup()); err != nil {
			return nil, fmt.Errorf("ranges[%d]: %w", i, err)
		}
		next = r.GetLast() + 1
	}
	if next != Slots {
		return nil, fmt.Errorf("%w: the ranges end at slot %d, not %d", ErrInvalid, next, Slots)
	}
	for i, mv := range m.Moves {
		if mv.GetId() == 0 || i > 0 && mv.GetId() <= m.Moves[i-1].GetId() {
			return nil, fmt.Errorf("%w: moves[%d] has ID %d, not one after the one before", ErrInvalid, i, mv.GetId())
		}
	}
	for _, s := range pm.GetPinned() {
		if s >= Slots {
			return nil, fmt.Errorf("%w: pinned slot %d is not one of 0..%d", ErrInvalid, s, Slots-1)
		}
		if m.Pinned == nil {
			m.Pinned = map[Slot]bool{}
		}
		m.Pinned[Slot(s)] = true
	}
	return m, nil
}

// ValidGroupID refuses a group ID that is empty, over 64 bytes, or not
// made of letters, digits, '-', '_' and '.': allotpb.ValidGroupID, which
// reports are checked with too.
func ValidGroupID(id string) error { return allotpb.ValidGroupID(id, true) }

// ParseRange reads "N" or "N-M" (inclusive) as slots.
func ParseRange(s string) (first, last Slot, err error) {
	a, b, isRange := strings.Cut(s, "-")
	x, err := strconv.Atoi(a)
	if err != nil {
		return 0, 0, fmt.Errorf("slots %q: not N or N-M", s)
	}
	y := x
	if isRange {
		if y, err = strconv.Atoi(b); err != nil {
			return 0, 0, fmt.Errorf("slots %q: not N or N-M", s)
		}
	}
	if x < 0 || y < x || y >= Slots {
		return 0, 0, fmt.Errorf("slots %q: a range of 0..%d, first ≤ last", s, Slots-1)
	}
	return Slot(x), Slot(y), nil
}

// FinishedMovesKept is how many finished moves a map keeps, the newest.
// It keeps every move under way, which the mover carries on, and the last
// finished ones, for an operator (allot shards status) and a client
// waiting on a move to read how they ended; older ones are forgotten, so
// that the map every agent fetches stays small however many moves a
// region makes.
const FinishedMovesKept = 100

// PruneMoves forgets the finished moves older than the newest
// FinishedMovesKept. The newest move is always kept, so NextMoveID never
// goes back.
func (m *Map) PruneMoves() {
	finished := 0
	for _, mv := range m.Moves {
		if !Active(mv) {
			finished++
		}
	}
	if finished <= FinishedMovesKept {
		return
	}
	drop := finished - FinishedMovesKept
	m.Moves = slices.DeleteFunc(slices.Clone(m.Moves), func(mv *allotpb.SlotMove) bool {
		if drop > 0 && !Active(mv) {
			drop--
			return true
		}
		return false
	})
}

// NextMoveID is the ID the next move planned gets: one past the newest.
func (m *Map) NextMoveID() uint64 {
	if n := len(m.Moves); n > 0 {
		return m.Moves[n-1].GetId() + 1
	}
	return 1
}

// FinishedBelow is the lowest ID of a move under way, or NextMoveID when
// none is: every move with a lower ID is finished, for good. Groups
// forget their steps of those moves by it.
func (m *Map) FinishedBelow() uint64 {
	for _, mv := range m.Moves {
		if Active(mv) {
			return mv.GetId()
		}
	}
	return m.NextMoveID()
}

// FindMove is the move with the ID among moves in order of their IDs, or
// nil: a move not planned yet, or finished and forgotten.
func FindMove(moves []*allotpb.SlotMove, id uint64) *allotpb.SlotMove {
	i, ok := slices.BinarySearchFunc(moves, id, func(mv *allotpb.SlotMove, id uint64) int { return cmp.Compare(mv.GetId(), id) })
	if !ok {
		return nil
	}
	return moves[i]
}

// Active reports whether a move is still under way.
func Active(mv *allotpb.SlotMove) bool {
	return mv.GetPhase() != allotpb.SlotMove_DONE && mv.GetPhase() != allotpb.SlotMove_ABORTED
}

// CanMove refuses a move of slots the map does not route to its source,
// to an unknown group or to the source itself, or overlapping a move
// under way.
func (m *Map) CanMove(mv *allotpb.SlotMove) error {
	first, last := mv.GetFirst(), mv.GetLast()
	if first > last || last >= Slots {
		return fmt.Errorf("%w: slots %d..%d are not a range of 0..%d", ErrInvalid, first, last, Slots-1)
	}
	if _, ok := m.Groups[mv.GetTo()]; !ok {
		return fmt.Errorf("%w: no group %q to move to", ErrInvalid, mv.GetTo())
	}
	if mv.GetFrom() == mv.GetTo() {
		return fmt.Errorf("%w: slots %d..%d are in group %q already", ErrInvalid, first, last, mv.GetTo())
	}
	for s := first; s <= last; s++ {
		if m.Pinned[Slot(s)] && first != last {
			return fmt.Errorf("%w: slot %d is pinned: move it alone (allot shards move %d --to GROUP) or unpin it", ErrInvalid, s, s)
		}
		if m.owner[s] != mv.GetFrom() {
			return fmt.Errorf("%w: slot %d is in group %q, not %q: move one owner's slots at a time", ErrInvalid, s, m.owner[s], mv.GetFrom())
		}
	}
	for _, o := range m.Moves {
		if Active(o) && o.GetFirst() <= last && first <= o.GetLast() {
			return fmt.Errorf("%w: slots %d..%d overlap move %d (%d..%d), still under way", ErrInvalid, first, last, o.GetId(), o.GetFirst(), o.GetLast())
		}
	}
	return nil
}
