package shardgroup

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/slotmove"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
)

// The home leader's mover (docs/coordinator.md#moving-a-slot-exactly-once-under-load):
// it carries each move a step at a time, each step one command in one
// group's log, and records the move's phase in the home group's log after
// each, so that a new leader resumes where the last one stopped.

// moveStepTimeout bounds one step of a move sent to a group.
const moveStepTimeout = 10 * time.Second

// kickMover wakes the mover, if it runs.
func (g *Group) kickMover() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// Move is the home leader's mover: it carries every move under way
// forward, one step at a time, until it is done or aborted. Each step is
// idempotent and the phase is recorded in the home group's log after
// each, so a new leader resumes where its predecessor stopped.
func (g *Group) Move(ctx context.Context) {
	t := g.cfg.Clock.NewTicker(slotmove.StepInterval)
	defer t.Stop()
	defer func() { g.cfg.Metrics.MovesActive.Set(0); g.cfg.Metrics.MoveOldest.Set(0) }()
	for {
		m := g.Map()
		if addrs := g.memberAddrs(); m.Version > 0 && len(addrs) > 0 && !slices.Equal(addrs, m.Groups[m.Home]) {
			// Members joined or left: agents learn the home group's
			// members from the map as well as from its answers.
			if _, err := g.applyShardMap(&fsmpb.ShardMapCommand{}); err != nil {
				g.cfg.Log.Warn("could not record the home group's members in the shard map", "error", err)
			}
			m = g.Map()
		}
		active, oldest := 0, int64(0)
		for _, mv := range m.Moves {
			if shard.Active(mv) && ctx.Err() == nil {
				active++
				if age := g.now().UnixNano() - mv.GetStartedUnixNano(); age > oldest {
					oldest = age
				}
				g.advanceMove(ctx, m, mv)
			}
		}
		g.cfg.Metrics.MovesActive.Set(float64(active))
		g.cfg.Metrics.MoveOldest.Set(time.Duration(oldest).Seconds())
		var owned int
		g.m.Read(func(st *state.State) { owned = st.OwnedSlots() })
		g.cfg.Metrics.SlotsOwned.Set(float64(owned))
		g.split.Store(m.Version > 0)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-g.kick:
		}
	}
}

// advanceMove takes one step of a move (slotmove.Advance), carrying each step to its group
// (stepAt) and recording each phase in this home group's log. Each step
// tells its group which moves are finished, so that the group forgets
// its steps of them.
func (g *Group) advanceMove(ctx context.Context, m *shard.Map, mv *allotpb.SlotMove) {
	finished := m.FinishedBelow()
	slotmove.Advance(mv, g.now().UnixNano(), slotmove.Steps{
		Step: func(group string, s allotpb.GroupSlotsRequest_Step, peer string) (*allotpb.GroupSlotsResponse, error) {
			return g.stepAt(ctx, m, group, &allotpb.GroupSlotsRequest{MoveId: mv.GetId(), First: mv.GetFirst(), Last: mv.GetLast(), Step: s, Peer: peer, Group: group, FinishedBelow: finished})
		},
		Phase: func(p allotpb.SlotMove_Phase, why string) bool {
			if _, err := g.applyShardMap(&fsmpb.ShardMapCommand{Phase: &allotpb.SlotMove{Id: mv.GetId(), Phase: p, Error: why, UpdatedUnixNano: g.now().UnixNano()}}); err != nil {
				g.cfg.Log.Warn("shard move: recording a phase failed; retrying", "move", mv.GetId(), "phase", p.String(), "error", err)
				return false
			}
			g.cfg.Log.Info("shard move", "move", mv.GetId(), "slots", fmt.Sprintf("%d-%d", mv.GetFirst(), mv.GetLast()), "from", mv.GetFrom(), "to", mv.GetTo(), "phase", p.String(), "error", why)
			return true
		},
		Retry: func(what, group string, err error) {
			g.cfg.Log.Warn("shard move: "+what+"; retrying", "move", mv.GetId(), "group", group, "error", err)
		},
	})
}

// stepAt carries one step to a group: here when it is this group,
// otherwise to each of its members in turn (a follower forwards it to its
// leader).
func (g *Group) stepAt(ctx context.Context, m *shard.Map, group string, req *allotpb.GroupSlotsRequest) (*allotpb.GroupSlotsResponse, error) {
	if group == g.ID() {
		return g.groupStep(req)
	}
	addrs := slices.Clone(m.Groups[group])
	if len(addrs) == 0 {
		return nil, fmt.Errorf("shard group %q has no known member", group)
	}
	var lastErr error
	for _, a := range addrs {
		sctx, cancel := context.WithTimeout(g.m.AsMember(ctx), moveStepTimeout)
		r, err := allotpb.NewShardServiceClient(g.m.Conn(a)).GroupSlots(sctx, req)
		cancel()
		if err == nil {
			return r, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("shard group %q: %w", group, lastErr)
}
