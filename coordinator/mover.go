package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/fsm/state"
	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
)

// The home leader's mover (docs/coordinator.md#moving-a-slot-exactly-once-under-load):
// it carries each move a step at a time, each step one command in one
// group's log, and records the move's phase in the home group's log after
// each, so that a new leader resumes where the last one stopped.

// moveStepTimeout bounds one step of a move sent to a group; moveAbortAfter
// is how long a move waits for its target before aborting it.
const (
	moveStepTimeout = 10 * time.Second
	moveAbortAfter  = 60 * time.Second
	moveRetry       = 250 * time.Millisecond
)

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
	t := c.cfg.Clock.NewTicker(moveRetry)
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

// advanceMove takes one step of a move, carrying each step to its group
// (stepAt) and recording each phase in this home group's log. Each step
// tells its group which moves are finished, so that the group forgets
// its steps of them.
func (c *Coordinator) advanceMove(ctx context.Context, m *shard.Map, mv *allotpb.SlotMove) {
	finished := m.FinishedBelow()
	advance(mv, c.now().UnixNano(), moveSteps{
		step: func(group string, s allotpb.GroupSlotsRequest_Step, peer string) (*allotpb.GroupSlotsResponse, error) {
			return c.stepAt(ctx, m, group, &allotpb.GroupSlotsRequest{MoveId: mv.GetId(), First: mv.GetFirst(), Last: mv.GetLast(), Step: s, Peer: peer, Group: group, FinishedBelow: finished})
		},
		phase: func(p allotpb.SlotMove_Phase, why string) bool {
			if _, err := c.applyShardMap(&fsmpb.ShardMapCommand{Phase: &allotpb.SlotMove{Id: mv.GetId(), Phase: p, Error: why, UpdatedUnixNano: c.now().UnixNano()}}); err != nil {
				c.log.Warn("shard move: recording a phase failed; retrying", "move", mv.GetId(), "phase", p.String(), "error", err)
				return false
			}
			c.log.Info("shard move", "move", mv.GetId(), "slots", fmt.Sprintf("%d-%d", mv.GetFirst(), mv.GetLast()), "from", mv.GetFrom(), "to", mv.GetTo(), "phase", p.String(), "error", why)
			return true
		},
		retry: func(what, group string, err error) {
			c.log.Warn("shard move: "+what+"; retrying", "move", mv.GetId(), "group", group, "error", err)
		},
	})
}

// moveSteps is what advance needs to take a move's step: a way to carry
// a step to a group, to record a phase at the home group (false when it
// could not), and to tell of a step that is to be taken again.
type moveSteps struct {
	step  func(group string, s allotpb.GroupSlotsRequest_Step, peer string) (*allotpb.GroupSlotsResponse, error)
	phase func(p allotpb.SlotMove_Phase, why string) bool
	retry func(what, group string, err error)
}

// advance takes one step of a move as of now (ns), by its phase: freeze at
// the source, acquire at the target (the commit point), release at the
// source, done. A target that refuses the acquire, or stays away for
// moveAbortAfter, gets the move aborted: the abort is recorded at the
// target first, then the source is unfrozen, then the move is recorded
// aborted. One of acquire and abort commits first in the target's log,
// and that decides, so the source never takes the slots back while the
// target might still take them: a leader that resumes the move from
// frozen and sends the acquire again finds it refused. The coordinator's
// mover and the simulator's engines both move slots by it.
func advance(mv *allotpb.SlotMove, now int64, ms moveSteps) {
	from, to := mv.GetFrom(), mv.GetTo()
	abort := func(why string) {
		r, err := ms.step(to, allotpb.GroupSlotsRequest_ABORT, from)
		switch {
		case err != nil:
			ms.retry("the target answers neither an acquire nor an abort", to, err)
			return
		case !r.GetDone():
			// The target refuses the abort: it acquired the slots (its
			// answer to the acquire was lost), or it cannot take a step
			// yet. The acquire, which is idempotent, tells which.
			a, aerr := ms.step(to, allotpb.GroupSlotsRequest_ACQUIRE, from)
			switch {
			case aerr == nil && a.GetDone():
				ms.phase(allotpb.SlotMove_ACQUIRED, "")
			case aerr == nil:
				ms.retry("the target refuses both the acquire and the abort", to, fmt.Errorf("abort: %s; acquire: %s", r.GetRefused(), a.GetRefused()))
			default:
				ms.retry("the target refuses the abort and does not answer the acquire", to, fmt.Errorf("abort: %s; acquire: %w", r.GetRefused(), aerr))
			}
			return
		}
		// The target will never acquire this move: the source may own
		// the slots again.
		r, err = ms.step(from, allotpb.GroupSlotsRequest_UNFREEZE, to)
		if err == nil && !r.GetDone() {
			err = errors.New(r.GetRefused())
		}
		if err != nil {
			ms.retry("unfreezing at the source failed", from, err)
			return
		}
		ms.phase(allotpb.SlotMove_ABORTED, why)
	}
	switch mv.GetPhase() {
	case allotpb.SlotMove_PLANNED:
		// Nothing is frozen before the freeze, so a refused freeze ends
		// the move with nothing to undo.
		r, err := ms.step(from, allotpb.GroupSlotsRequest_FREEZE, to)
		switch {
		case err != nil:
			ms.retry("the source did not freeze", from, err)
		case r.GetDone():
			ms.phase(allotpb.SlotMove_FROZEN, "")
		default:
			ms.phase(allotpb.SlotMove_ABORTED, "the source refused to freeze: "+r.GetRefused())
		}
	case allotpb.SlotMove_FROZEN:
		r, err := ms.step(to, allotpb.GroupSlotsRequest_ACQUIRE, from)
		switch {
		case err == nil && r.GetDone():
			ms.phase(allotpb.SlotMove_ACQUIRED, "")
		case err == nil:
			abort("the target refused the slots: " + r.GetRefused())
		case now-mv.GetUpdatedUnixNano() > int64(moveAbortAfter):
			abort(fmt.Sprintf("the target did not acquire the slots within %v: %v", moveAbortAfter, err))
		default:
			ms.retry("the target did not acquire", to, err)
		}
	case allotpb.SlotMove_ACQUIRED:
		r, err := ms.step(from, allotpb.GroupSlotsRequest_RELEASE, to)
		switch {
		case err != nil:
			ms.retry("the source did not release", from, err)
		case r.GetDone():
			ms.phase(allotpb.SlotMove_DONE, "")
		default:
			ms.retry("the source refuses to release slots the target acquired", from, errors.New(r.GetRefused()))
		}
	}
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
