package coordinator

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/fsm/state"
	"github.com/allot-io/allot/coordinator/internal/slotmove"
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
func (c *Coordinator) kickMover() {
	select {
	case c.moverKick <- struct{}{}:
	default:
	}
}

// moveSlots is the home leader's mover: it carries every move under way
// forward, one step at a time, until it is done or aborted. Each step is
// idempotent and the phase is recorded in the home group's log after
// each, so a new leader resumes where its predecessor stopped.
func (c *Coordinator) moveSlots(ctx context.Context) {
	t := c.cfg.Clock.NewTicker(slotmove.StepInterval)
	defer t.Stop()
	defer func() { c.metrics.movesActive.Set(0); c.metrics.moveOldest.Set(0) }()
	for {
		m := c.shardMap()
		if addrs := c.memberAddrs(); m.Version > 0 && len(addrs) > 0 && !slices.Equal(addrs, m.Groups[m.Home]) {
			// Members joined or left: agents learn the home group's
			// members from the map as well as from its answers.
			if _, err := c.applyShardMap(&fsmpb.ShardMapCommand{}); err != nil {
				c.log.Warn("could not record the home group's members in the shard map", "error", err)
			}
			m = c.shardMap()
		}
		active, oldest := 0, int64(0)
		for _, mv := range m.Moves {
			if shard.Active(mv) && ctx.Err() == nil {
				active++
				if age := c.now().UnixNano() - mv.GetStartedUnixNano(); age > oldest {
					oldest = age
				}
				c.advanceMove(ctx, m, mv)
			}
		}
		c.metrics.movesActive.Set(float64(active))
		c.metrics.moveOldest.Set(time.Duration(oldest).Seconds())
		var owned int
		c.fsm.Read(func(st *state.State) { owned = st.OwnedSlots() })
		c.metrics.slotsOwned.Set(float64(owned))
		c.split.Store(m.Version > 0)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-c.moverKick:
		}
	}
}

// advanceMove takes one step of a move (slotmove.Advance), carrying each step to its group
// (stepAt) and recording each phase in this home group's log. Each step
// tells its group which moves are finished, so that the group forgets
// its steps of them.
func (c *Coordinator) advanceMove(ctx context.Context, m *shard.Map, mv *allotpb.SlotMove) {
	finished := m.FinishedBelow()
	slotmove.Advance(mv, c.now().UnixNano(), slotmove.Steps{
		Step: func(group string, s allotpb.GroupSlotsRequest_Step, peer string) (*allotpb.GroupSlotsResponse, error) {
			return c.stepAt(ctx, m, group, &allotpb.GroupSlotsRequest{MoveId: mv.GetId(), First: mv.GetFirst(), Last: mv.GetLast(), Step: s, Peer: peer, Group: group, FinishedBelow: finished})
		},
		Phase: func(p allotpb.SlotMove_Phase, why string) bool {
			if _, err := c.applyShardMap(&fsmpb.ShardMapCommand{Phase: &allotpb.SlotMove{Id: mv.GetId(), Phase: p, Error: why, UpdatedUnixNano: c.now().UnixNano()}}); err != nil {
				c.log.Warn("shard move: recording a phase failed; retrying", "move", mv.GetId(), "phase", p.String(), "error", err)
				return false
			}
			c.log.Info("shard move", "move", mv.GetId(), "slots", fmt.Sprintf("%d-%d", mv.GetFirst(), mv.GetLast()), "from", mv.GetFrom(), "to", mv.GetTo(), "phase", p.String(), "error", why)
			return true
		},
		Retry: func(what, group string, err error) {
			c.log.Warn("shard move: "+what+"; retrying", "move", mv.GetId(), "group", group, "error", err)
		},
	})
}

// stepAt carries one step to a group: here when it is this group,
// otherwise to each of its members in turn (a follower forwards it to its
// leader).
func (c *Coordinator) stepAt(ctx context.Context, m *shard.Map, group string, req *allotpb.GroupSlotsRequest) (*allotpb.GroupSlotsResponse, error) {
	if group == c.groupID() {
		return c.groupStep(req)
	}
	addrs := slices.Clone(m.Groups[group])
	if len(addrs) == 0 {
		return nil, fmt.Errorf("shard group %q has no known member", group)
	}
	var lastErr error
	for _, a := range addrs {
		sctx, cancel := context.WithTimeout(withToken(ctx, c.joinToken()), moveStepTimeout)
		r, err := allotpb.NewShardServiceClient(c.peers.conn(a)).GroupSlots(sctx, req)
		cancel()
		if err == nil {
			return r, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("shard group %q: %w", group, lastErr)
}
