package allocator

import (
	"fmt"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/slotmove"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EngineShards makes an Engine one shard group of a region split into
// groups (docs/coordinator.md#shard-groups), for the simulator. Its state
// keeps the same slot table the coordinator's does: a usage batch holding
// a slot the group does not own is refused whole, as FAILED_PRECONDITION
// with a SlotsMoved detail (nothing of it applied), and demand for keys
// outside its slots gets no lease, as at the leader (Allocator.Take). The
// home group holds the shard map, and StepMoves carries its moves out step
// by step as the home leader's mover does.
type EngineShards struct {
	// Group is the group's ID.
	Group string
	// Home makes it the home group: it owns every slot until moves give
	// some away, holds the map, and divides global rules. Any other group
	// starts owning nothing.
	Home bool
}

// MoveStepInterval is how often the home leader's mover takes the next
// step of each move under way: a move takes three of them (freeze,
// acquire, release and done).
const MoveStepInterval = slotmove.StepInterval

// startShards makes the engine a shard group at now: a group other than
// home commits an empty slot table first, as startGroup does.
func (e *Engine) startShards(now time.Time) error {
	sh := e.cfg.Shards
	if sh == nil {
		return nil
	}
	if err := shard.ValidGroupID(sh.Group); err != nil {
		return fmt.Errorf("allocator: engine shard group: %w", err)
	}
	if sh.Home {
		return nil
	}
	r := e.st.Apply(state.CmdSlots, &fsmpb.SlotsCommand{Op: fsmpb.SlotsCommand_EMPTY, Group: sh.Group, ProposedUnixNano: now.UnixNano()}).(*fsmpb.SlotsResult)
	if !r.GetDone() {
		return fmt.Errorf("allocator: engine shard group %q: %s", sh.Group, r.GetRefused())
	}
	return nil
}

// groupID is the engine's group: "main" when it is not split.
func (e *Engine) groupID() string {
	if e.cfg.Shards == nil {
		return shard.DefaultGroup
	}
	return e.cfg.Shards.Group
}

// wrongGroup refuses, before anything, a report for another group.
func (e *Engine) wrongGroup(req *allotpb.ReportRequest) error {
	if g := req.GetGroup(); g != "" && g != e.groupID() {
		return status.Errorf(codes.FailedPrecondition, "this is shard group %q, not %q: nothing of the report was applied", e.groupID(), g)
	}
	return nil
}

// slotsMoved is the refusal of a report whose usage falls in slots this
// group does not own, as the coordinator's.
func (e *Engine) slotsMoved(moved []*fsmpb.MovedReport) error {
	if len(moved) == 0 {
		return nil
	}
	slots := moved[0].GetSlots()
	st := status.New(codes.FailedPrecondition, fmt.Sprintf("shard group %q does not own slots of this report's usage (%d of them): nothing of it was applied; route it by a newer shard map", e.groupID(), len(slots)))
	if d, err := st.WithDetails(&allotpb.SlotsMoved{Group: e.groupID(), Slots: slots, MapVersion: e.st.ShardMapVersion()}); err == nil {
		st = d
	}
	return st.Err()
}

// home reports whether the engine is its region's home group (or a
// region never split).
func (e *Engine) home() bool { return e.cfg.Shards == nil || e.cfg.Shards.Home }

// OwnedSlots counts the slots the engine's group owns.
func (e *Engine) OwnedSlots() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.OwnedSlots()
}

// AddGroup records a group in the home group's map, as the AddGroup call
// does.
func (e *Engine) AddGroup(id string, addrs []string) (*allotpb.ShardMap, error) {
	if err := shard.ValidGroupID(id); err != nil {
		return nil, fmt.Errorf("allocator: engine add group: %w", err)
	}
	return e.applyShardMap(&fsmpb.ShardMapCommand{AddGroup: &allotpb.ShardGroup{Id: id, Coordinators: addrs}})
}

// MoveSlots plans a move of slots first..last to a group, as `allot
// shards move` does; StepMoves carries it out.
func (e *Engine) MoveSlots(now time.Time, first, last uint32, to string) (*allotpb.SlotMove, error) {
	e.mu.Lock()
	from := e.shardMapLocked().Owner(shard.Slot(first))
	e.mu.Unlock()
	pm, err := e.applyShardMap(&fsmpb.ShardMapCommand{Plan: &allotpb.SlotMove{First: first, Last: last, From: from, To: to, StartedUnixNano: now.UnixNano()}})
	if err != nil {
		return nil, err
	}
	return pm.GetMoves()[len(pm.GetMoves())-1], nil
}

// ShardMap answers GetShardMap: the map, or only its version when the
// caller knows it.
func (e *Engine) ShardMap(known uint64) *allotpb.ShardMap {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.shardMapLocked()
	if known >= m.Version && m.Version > 0 {
		return &allotpb.ShardMap{Version: m.Version}
	}
	return m.Proto()
}

// shardMapLocked is the home group's map, as shardMap.
func (e *Engine) shardMapLocked() *shard.Map {
	if sm := e.st.ShardMap(); sm != nil {
		return sm.Clone()
	}
	m := shard.Single(e.groupID(), nil)
	m.Version = 0
	return m
}

func (e *Engine) applyShardMap(cmd *fsmpb.ShardMapCommand) (*allotpb.ShardMap, error) {
	if e.cfg.Shards == nil || !e.cfg.Shards.Home {
		return nil, fmt.Errorf("allocator: engine: only the home group holds the shard map")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	cmd.Home = e.groupID()
	switch res := e.st.Apply(state.CmdShardMap, cmd).(type) {
	case error:
		return nil, fmt.Errorf("allocator: engine: %w", res)
	case *allotpb.ShardMap:
		return res, nil
	default:
		return nil, fmt.Errorf("allocator: engine: shard map change answered %T", res)
	}
}

// GroupSlots commits one step of a move in this group's state, as the
// GroupSlots call does; an acquire puts the slots' keys in learning mode
// for one lease period.
func (e *Engine) GroupSlots(now time.Time, req *allotpb.GroupSlotsRequest) (*allotpb.GroupSlotsResponse, error) {
	op, ok := slotmove.Op(req.GetStep())
	if !ok {
		return nil, fmt.Errorf("allocator: engine: unknown step %v", req.GetStep())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if sh := e.cfg.Shards; sh != nil && !sh.Home {
		if err := slotmove.NotStarted(e.st, e.groupID()); err != nil {
			return nil, err
		}
	}
	r := e.st.Apply(state.CmdSlots, &fsmpb.SlotsCommand{
		Op: op, MoveId: req.GetMoveId(), First: req.GetFirst(), Last: req.GetLast(), Peer: req.GetPeer(),
		Group: e.groupID(), ProposedUnixNano: now.UnixNano(), FinishedBelow: req.GetFinishedBelow(),
	}).(*fsmpb.SlotsResult)
	if r.GetDone() && op == fsmpb.SlotsCommand_ACQUIRE {
		e.alloc.LearnSlots(shard.Slot(req.GetFirst()), shard.Slot(req.GetLast()), now.UnixNano())
	}
	return &allotpb.GroupSlotsResponse{Done: r.GetDone(), Refused: r.GetRefused(), Owned: r.GetOwned()}, nil
}

// StepMoves takes the next step of every move under way, as the home
// leader's mover does every MoveStepInterval; group finds each group's
// engine. It returns how many moves are still under way.
func (e *Engine) StepMoves(now time.Time, group func(id string) *Engine) int {
	e.mu.Lock()
	m := e.shardMapLocked()
	e.mu.Unlock()
	active, finished := 0, m.FinishedBelow()
	for _, mv := range m.Moves {
		if !shard.Active(mv) {
			continue
		}
		e.advanceMove(now, mv, finished, group)
		if cur := e.moveByID(mv.GetId()); cur != nil && shard.Active(cur) {
			active++
		}
	}
	return active
}

func (e *Engine) moveByID(id uint64) *allotpb.SlotMove {
	e.mu.Lock()
	defer e.mu.Unlock()
	return shard.FindMove(e.shardMapLocked().Moves, id)
}

// advanceMove is the mover's step (slotmove.Advance) against engines: each step
// one command in one group's state, telling it the moves finished below
// finished, the phase recorded at home after it.
func (e *Engine) advanceMove(now time.Time, mv *allotpb.SlotMove, finished uint64, group func(string) *Engine) {
	slotmove.Advance(mv, now.UnixNano(), slotmove.Steps{
		Step: func(g string, s allotpb.GroupSlotsRequest_Step, peer string) (*allotpb.GroupSlotsResponse, error) {
			eng := group(g)
			if eng == nil {
				return nil, fmt.Errorf("no group %q", g)
			}
			return eng.GroupSlots(now, &allotpb.GroupSlotsRequest{MoveId: mv.GetId(), First: mv.GetFirst(), Last: mv.GetLast(), Step: s, Peer: peer, Group: g, FinishedBelow: finished})
		},
		// A phase refused leaves the move where it was: the next call
		// takes the step again, as the mover retries.
		Phase: func(p allotpb.SlotMove_Phase, why string) bool {
			_, err := e.applyShardMap(&fsmpb.ShardMapCommand{Phase: &allotpb.SlotMove{Id: mv.GetId(), Phase: p, Error: why, UpdatedUnixNano: now.UnixNano()}})
			return err == nil
		},
		Retry: func(string, string, error) {},
	})
}
