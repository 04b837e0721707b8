package shard

import (
	"fmt"
	"strings"

	allotpb "github.com/allot-io/allot/proto"
)

// Run is slots First..Last, every one routed to Group.
type Run struct {
	First, Last Slot
	Group       string
}

// String is the run as an operator types it: N or N-M.
func (r Run) String() string {
	if r.First == r.Last {
		return fmt.Sprint(r.First)
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// RunList writes runs as "N-M, K", as an operator types each.
func RunList(runs []Run) string {
	parts := make([]string, len(runs))
	for i, r := range runs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ", ")
}

// MaxSplitMoves bounds the moves SplitMove makes of one range. Every move
// under way is in the map every agent fetches and in every step of the
// mover's loop; a range held in more runs than this is better moved a
// part at a time.
const MaxSplitMoves = 64

// SplitMove divides a move of slots first..last to group to into moves
// the slot-move protocol carries out exactly once: one move per run of
// contiguous slots of one owner other than to, in slot order, each from
// that owner (docs/coordinator.md#moving-a-slot-exactly-once-under-load).
// The runs to owns already are skipped: they stay where they are. Every
// move is checked as CanMove checks it when it is planned, against this
// map, and one refusal refuses them all, so that nothing is planned of a
// range that cannot be moved whole. A pinned slot owned by another group
// refuses a range of more than one slot, as it refuses one move: split,
// a range would otherwise move it alone.
func (m *Map) SplitMove(first, last Slot, to string) (moves []*allotpb.SlotMove, skipped []Run, err error) {
	if first > last || int(last) >= Slots {
		return nil, nil, fmt.Errorf("%w: slots %d..%d are not a range of 0..%d", ErrInvalid, first, last, Slots-1)
	}
	if _, ok := m.Groups[to]; !ok {
		return nil, nil, fmt.Errorf("%w: no group %q to move to", ErrInvalid, to)
	}
	var runs []Run
	for s := int(first); s <= int(last); s++ {
		g := m.owner[s]
		if g != to && m.Pinned[Slot(s)] && first != last {
			return nil, nil, fmt.Errorf("%w: slot %d is pinned: move it alone (allot shards move %d --to GROUP) or unpin it", ErrInvalid, s, s)
		}
		if n := len(runs); n > 0 && runs[n-1].Group == g && int(runs[n-1].Last) == s-1 {
			runs[n-1].Last = Slot(s)
			continue
		}
		runs = append(runs, Run{First: Slot(s), Last: Slot(s), Group: g})
	}
	for _, r := range runs {
		if r.Group == to {
			skipped = append(skipped, r)
			continue
		}
		moves = append(moves, &allotpb.SlotMove{First: uint32(r.First), Last: uint32(r.Last), From: r.Group, To: to})
	}
	if len(moves) > MaxSplitMoves {
		return nil, nil, fmt.Errorf("%w: slots %d-%d are held in %d runs by groups other than %q, one move each; move at most %d at a time (a narrower range)",
			ErrInvalid, first, last, len(moves), to, MaxSplitMoves)
	}
	for _, mv := range moves {
		if err := m.CanMove(mv); err != nil {
			return nil, nil, err
		}
	}
	return moves, skipped, nil
}
