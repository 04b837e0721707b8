package slotmove

import (
	"errors"
	"fmt"
	"time"

	allotpb "github.com/allot-io/allot/proto"
)

// AbortAfter is how long a move waits for its target before aborting it;
// StepInterval is how often the home leader's mover takes the next step
// of each move under way.
const (
	AbortAfter   = 60 * time.Second
	StepInterval = 250 * time.Millisecond
)

// Steps is what Advance needs to take a move's step: a way to carry a
// step to a group, to record a phase at the home group (false when it
// could not), and to tell of a step that is to be taken again.
type Steps struct {
	Step  func(group string, s allotpb.GroupSlotsRequest_Step, peer string) (*allotpb.GroupSlotsResponse, error)
	Phase func(p allotpb.SlotMove_Phase, why string) bool
	Retry func(what, group string, err error)
}

// Advance takes one step of a move as of now (ns), by its phase: freeze at
// the source, acquire at the target (the commit point), release at the
// source, done. A target that refuses the acquire, or stays away for
// AbortAfter, gets the move aborted: the abort is recorded at the
// target first, then the source is unfrozen, then the move is recorded
// aborted. One of acquire and abort commits first in the target's log,
// and that decides, so the source never takes the slots back while the
// target might still take them: a leader that resumes the move from
// frozen and sends the acquire again finds it refused. The coordinator's
// mover and the simulator's engines both move slots by it.
func Advance(mv *allotpb.SlotMove, now int64, ms Steps) {
	from, to := mv.GetFrom(), mv.GetTo()
	abort := func(why string) {
		r, err := ms.Step(to, allotpb.GroupSlotsRequest_ABORT, from)
		switch {
		case err != nil:
			ms.Retry("the target answers neither an acquire nor an abort", to, err)
			return
		case !r.GetDone():
			// The target refuses the abort: it acquired the slots (its
			// answer to the acquire was lost), or it cannot take a step
			// yet. The acquire, which is idempotent, tells which.
			a, aerr := ms.Step(to, allotpb.GroupSlotsRequest_ACQUIRE, from)
			switch {
			case aerr == nil && a.GetDone():
				ms.Phase(allotpb.SlotMove_ACQUIRED, "")
			case aerr == nil:
				ms.Retry("the target refuses both the acquire and the abort", to, fmt.Errorf("abort: %s; acquire: %s", r.GetRefused(), a.GetRefused()))
			default:
				ms.Retry("the target refuses the abort and does not answer the acquire", to, fmt.Errorf("abort: %s; acquire: %w", r.GetRefused(), aerr))
			}
			return
		}
		// The target will never acquire this move: the source may own
		// the slots again.
		r, err = ms.Step(from, allotpb.GroupSlotsRequest_UNFREEZE, to)
		if err == nil && !r.GetDone() {
			err = errors.New(r.GetRefused())
		}
		if err != nil {
			ms.Retry("unfreezing at the source failed", from, err)
			return
		}
		ms.Phase(allotpb.SlotMove_ABORTED, why)
	}
	switch mv.GetPhase() {
	case allotpb.SlotMove_PLANNED:
		// Nothing is frozen before the freeze, so a refused freeze ends
		// the move with nothing to undo.
		r, err := ms.Step(from, allotpb.GroupSlotsRequest_FREEZE, to)
		switch {
		case err != nil:
			ms.Retry("the source did not freeze", from, err)
		case r.GetDone():
			ms.Phase(allotpb.SlotMove_FROZEN, "")
		default:
			ms.Phase(allotpb.SlotMove_ABORTED, "the source refused to freeze: "+r.GetRefused())
		}
	case allotpb.SlotMove_FROZEN:
		r, err := ms.Step(to, allotpb.GroupSlotsRequest_ACQUIRE, from)
		switch {
		case err == nil && r.GetDone():
			ms.Phase(allotpb.SlotMove_ACQUIRED, "")
		case err == nil:
			abort("the target refused the slots: " + r.GetRefused())
		case now-mv.GetUpdatedUnixNano() > int64(AbortAfter):
			abort(fmt.Sprintf("the target did not acquire the slots within %v: %v", AbortAfter, err))
		default:
			ms.Retry("the target did not acquire", to, err)
		}
	case allotpb.SlotMove_ACQUIRED:
		r, err := ms.Step(from, allotpb.GroupSlotsRequest_RELEASE, to)
		switch {
		case err != nil:
			ms.Retry("the source did not release", from, err)
		case r.GetDone():
			ms.Phase(allotpb.SlotMove_DONE, "")
		default:
			ms.Retry("the source refuses to release slots the target acquired", from, errors.New(r.GetRefused()))
		}
	}
}
