package state

import (
	"errors"
	"fmt"
	"slices"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/proto"
)

// ErrShardMap is wrapped by every ShardMapCommand refused.
var ErrShardMap = errors.New("shard map change refused")

// ShardMap is the region's shard map as the home group holds it, or nil
// when the region was never split (one group owning every slot). The
// caller must not change it.
func (s *State) ShardMap() *shard.Map { return s.shardMap }

// ShardMapVersion is the map's version, 0 when there is none.
func (s *State) ShardMapVersion() uint64 {
	if s.shardMap == nil {
		return 0
	}
	return s.shardMap.Version
}

// applyShardMap changes the map: a group added, a move planned or moved
// on. It returns the new map's wire form, or an error wrapping
// ErrShardMap that changed nothing.
func (s *State) applyShardMap(cmd *fsmpb.ShardMapCommand) any {
	m := s.shardMap
	if m == nil {
		if cmd.GetHome() == "" {
			return fmt.Errorf("%w: no map yet, and the command names no home group", ErrShardMap)
		}
		m = shard.Single(cmd.GetHome(), cmd.GetCoordinators())
		m.Version = 0
	} else {
		m = m.Clone()
	}
	// The home group's members as its leader knows them now: the map
	// follows the home group's membership.
	homeMoved := false
	if hc := cmd.GetCoordinators(); len(hc) > 0 && !slices.Equal(m.Groups[m.Home], hc) {
		m.Groups[m.Home] = append([]string(nil), hc...)
		homeMoved = true
	}
	switch {
	case cmd.GetAddGroup() != nil:
		g := cmd.GetAddGroup()
		if err := shard.ValidGroupID(g.GetId()); err != nil {
			return fmt.Errorf("%w: %v", ErrShardMap, err)
		}
		if old, dup := m.Groups[g.GetId()]; dup && s.shardMap != nil && slices.Equal(old, g.GetCoordinators()) && !homeMoved {
			return s.shardMap.Proto() // added before: done again
		}
		// A group added again with other members: its addresses change.
		m.Groups[g.GetId()] = append([]string(nil), g.GetCoordinators()...)
	case cmd.GetPlan() != nil:
		p := proto.Clone(cmd.GetPlan()).(*allotpb.SlotMove)
		if err := m.CanMove(p); err != nil {
			return fmt.Errorf("%w: %v", ErrShardMap, err)
		}
		p.Id = m.NextMoveID()
		p.Phase = allotpb.SlotMove_PLANNED
		p.UpdatedUnixNano = p.GetStartedUnixNano()
		m.Moves = append(m.Moves, p)
	case cmd.GetPhase() != nil:
		ph := cmd.GetPhase()
		i := slices.IndexFunc(m.Moves, func(mv *allotpb.SlotMove) bool { return mv.GetId() == ph.GetId() })
		if i < 0 {
			return fmt.Errorf("%w: no move %d (a finished move is forgotten once %d newer ones have finished)", ErrShardMap, ph.GetId(), shard.FinishedMovesKept)
		}
		mv := proto.Clone(m.Moves[i]).(*allotpb.SlotMove)
		if finished(mv.GetPhase()) || ph.GetPhase() < mv.GetPhase() {
			// A step done before: nothing to change but the home's members.
			if !homeMoved {
				return s.shardMap.Proto()
			}
			break
		}
		mv.Phase, mv.Error, mv.UpdatedUnixNano = ph.GetPhase(), ph.GetError(), ph.GetUpdatedUnixNano()
		if mv.GetPhase() == allotpb.SlotMove_DONE {
			if err := m.Assign(shard.Slot(mv.GetFirst()), shard.Slot(mv.GetLast()), mv.GetTo()); err != nil {
				return fmt.Errorf("%w: %v", ErrShardMap, err)
			}
		}
		m.Moves[i] = mv
	case cmd.GetPin() != nil:
		pin := cmd.GetPin()
		if pin.GetSlot() >= shard.Slots {
			return fmt.Errorf("%w: slot %d is not one of 0..%d", ErrShardMap, pin.GetSlot(), shard.Slots-1)
		}
		sl := shard.Slot(pin.GetSlot())
		if m.Pinned[sl] == !pin.GetUnpin() && !homeMoved && s.shardMap != nil {
			return s.shardMap.Proto() // pinned (or not) already
		}
		if m.Pinned == nil {
			m.Pinned = map[shard.Slot]bool{}
		}
		if pin.GetUnpin() {
			delete(m.Pinned, sl)
		} else {
			m.Pinned[sl] = true
		}
	default:
		if s.shardMap != nil && !homeMoved {
			return s.shardMap.Proto()
		}
	}
	m.PruneMoves()
	m.Version++
	s.shardMap = m
	return m.Proto()
}

// finished reports whether a move's phase is its last.
func finished(p allotpb.SlotMove_Phase) bool {
	return p == allotpb.SlotMove_DONE || p == allotpb.SlotMove_ABORTED
}

// restoreShardMap reads the map back from a snapshot.
func (s *State) restoreShardMap(pm *allotpb.ShardMap) error {
	m, err := shard.FromProto(pm)
	if err != nil {
		return err
	}
	s.shardMap = m
	return nil
}
