package shard

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	allotpb "github.com/allot-io/allot/proto"
)

// TestSplitMove: a range move is the moves of its runs of other owners,
// each from its owner, skipping what the target owns already; a range
// that cannot be moved whole plans nothing.
func TestSplitMove(t *testing.T) {
	// main owns everything but 7695 (g1) and 9000-9009 (g2); 12000 is
	// pinned in main, 7695 pinned in g1; move 42 (100-199 to g2) is under way.
	m := Single("main", nil)
	m.Groups["g1"], m.Groups["g2"] = nil, nil
	for _, a := range []struct {
		first, last Slot
		g           string
	}{{7695, 7695, "g1"}, {9000, 9009, "g2"}} {
		if err := m.Assign(a.first, a.last, a.g); err != nil {
			t.Fatal(err)
		}
	}
	m.Pinned = map[Slot]bool{12000: true, 7695: true}
	m.Moves = []*allotpb.SlotMove{{Id: 42, First: 100, Last: 199, From: "main", To: "g2", Phase: allotpb.SlotMove_FROZEN}}

	tests := []struct {
		name        string
		first, last Slot
		to          string
		moves       string // from:first-last, ...
		skipped     string
		err         string
	}{
		{name: "one owner", first: 200, last: 7000, to: "g1", moves: "main:200-7000"},
		{name: "the target owns one slot of it", first: 200, last: 8191, to: "g1", moves: "main:200-7694 main:7696-8191", skipped: "7695"},
		{name: "several owners, owner by owner", first: 8500, last: 9500, to: "g1", moves: "main:8500-8999 g2:9000-9009 main:9010-9500"},
		{name: "to the home group", first: 7696, last: 9005, to: "main", moves: "g2:9000-9005", skipped: "7696-8999"},
		{name: "all in the target already", first: 9001, last: 9003, to: "g2", skipped: "9001-9003"},
		{name: "a pinned slot in the target stays", first: 7600, last: 7700, to: "g1", moves: "main:7600-7694 main:7696-7700", skipped: "7695"},
		{name: "a pinned slot elsewhere refuses the range", first: 7600, last: 7700, to: "g2", err: "slot 7695 is pinned"},
		{name: "a pinned slot alone moves", first: 12000, last: 12000, to: "g1", moves: "main:12000"},
		{name: "a range over a pinned slot of the source", first: 11000, last: 13000, to: "g1", err: "slot 12000 is pinned"},
		{name: "overlapping a move under way plans nothing", first: 0, last: 150, to: "g1", err: "overlap move 42"},
		{name: "no such group", first: 0, last: 10, to: "g9", err: `no group "g9"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			moves, skipped, err := m.SplitMove(tt.first, tt.last, tt.to)
			if tt.err != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.err) || moves != nil {
					t.Fatalf("SplitMove(%d, %d, %s) = %v, %v; want no move and an error with %q", tt.first, tt.last, tt.to, moves, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, mv := range moves {
				if mv.GetTo() != tt.to {
					t.Errorf("move %v is not to %s", mv, tt.to)
				}
				got = append(got, fmt.Sprintf("%s:%s", mv.GetFrom(), Run{First: Slot(mv.GetFirst()), Last: Slot(mv.GetLast())}))
			}
			if g := strings.Join(got, " "); g != tt.moves {
				t.Errorf("moves %q, want %q", g, tt.moves)
			}
			if g := RunList(skipped); g != tt.skipped {
				t.Errorf("skipped %q, want %q", g, tt.skipped)
			}
		})
	}
}

// TestSplitMoveBounded: a range held in more runs than MaxSplitMoves
// plans nothing and says how to move it.
func TestSplitMoveBounded(t *testing.T) {
	m := Single("main", nil)
	m.Groups["g1"] = nil
	for s := Slot(0); s < 2*(MaxSplitMoves+1); s += 2 {
		if err := m.Assign(s, s, "g1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := m.SplitMove(0, 2*MaxSplitMoves+1, "g1"); err == nil || !strings.Contains(err.Error(), "narrower range") {
		t.Fatalf("a range of %d runs: %v", MaxSplitMoves+1, err)
	}
	if moves, _, err := m.SplitMove(0, 2*MaxSplitMoves-1, "g1"); err != nil || len(moves) != MaxSplitMoves {
		t.Fatalf("a range of %d runs: %d moves, %v", MaxSplitMoves, len(moves), err)
	}
}
