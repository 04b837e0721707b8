package shard

import (
	"testing"

	"pgregory.net/rapid"
)

func TestRebalanceEvensLoad(t *testing.T) {
	m := Single("main", nil)
	m.Groups["g1"], m.Groups["g2"] = nil, nil
	var load [Slots]float64
	for s := range load {
		load[s] = 1 // every slot in main: 16,384 for main, 0 for the others
	}
	ps := Rebalance(m, &load, 0.05, 10).Proposals
	for _, p := range ps {
		if err := m.Assign(p.First, p.Last, p.To); err != nil {
			t.Fatal(err)
		}
	}
	_, loads := GroupLoads(m, &load)
	for i, l := range loads {
		if l < Slots/3*0.9 || l > Slots/3*1.1 {
			t.Fatalf("group %d carries %.0f of %d after %d moves %v", i, l, Slots, len(ps), ps)
		}
	}
}

// TestRebalanceNeverWorsens: whatever the load and the map, the proposed
// moves each take one owner's run of unpinned slots, and the most loaded
// group carries no more after them than before.
func TestRebalanceNeverWorsens(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := Single("main", nil)
		m.Groups["g1"], m.Groups["g2"] = nil, nil
		for range rapid.IntRange(0, 6).Draw(t, "assign") {
			a := Slot(rapid.IntRange(0, Slots-1).Draw(t, "a"))
			b := Slot(rapid.IntRange(int(a), min(int(a)+3000, Slots-1)).Draw(t, "b"))
			_ = m.Assign(a, b, rapid.SampledFrom([]string{"main", "g1", "g2"}).Draw(t, "g"))
		}
		m.Pinned = map[Slot]bool{}
		for range rapid.IntRange(0, 5).Draw(t, "pins") {
			m.Pinned[Slot(rapid.IntRange(0, Slots-1).Draw(t, "pin"))] = true
		}
		var load [Slots]float64
		for range rapid.IntRange(1, 50).Draw(t, "hot") {
			load[rapid.IntRange(0, Slots-1).Draw(t, "slot")] += float64(rapid.IntRange(1, 1000).Draw(t, "l"))
		}
		_, before := GroupLoads(m, &load)
		for _, p := range Rebalance(m, &load, 0.1, 20).Proposals {
			for s := p.First; s <= p.Last; s++ {
				if m.Owner(s) != p.From || m.Pinned[s] {
					t.Fatalf("proposal %+v takes slot %d of %s (pinned %v)", p, s, m.Owner(s), m.Pinned[s])
				}
			}
			if err := m.Assign(p.First, p.Last, p.To); err != nil {
				t.Fatal(err)
			}
		}
		_, after := GroupLoads(m, &load)
		if maxOf(after) > maxOf(before)+1e-9 {
			t.Fatalf("the most loaded group went from %.0f to %.0f", maxOf(before), maxOf(after))
		}
	})
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// TestRebalanceSaysWhy: a rebalance that proposes nothing (or stops
// short) says why, truthfully: balanced, nothing measured, no move that
// evens the load out, the load all pinned, or the moves asked for spent.
func TestRebalanceSaysWhy(t *testing.T) {
	tests := []struct {
		name      string
		load      map[Slot]float64 // slots below 8192 are main's, the rest g1's
		pinned    []Slot
		maxMoves  int
		proposals int
		stop      Stop
		hi, lo    string
		gap, lite float64
	}{
		{name: "balanced", load: map[Slot]float64{1: 3, 9000: 3.2}, stop: Balanced},
		{name: "no load", load: map[Slot]float64{}, stop: NoLoad},
		// The region: main at 4 entries/s in two tenants' slots,
		// g1 at 2. The mean is 3; a move may carry 1, and main's
		// lightest slot carries 2.
		{name: "no move evens it", load: map[Slot]float64{1: 2, 2: 2, 9000: 2}, stop: NoFit, hi: "main", lo: "g1", gap: 1, lite: 2},
		{name: "all pinned", load: map[Slot]float64{1: 2, 2: 2, 9000: 1}, pinned: []Slot{1, 2}, stop: AllPinned, hi: "main", lo: "g1", gap: 1.5},
		// One move of 2.5 (a run may carry 3) leaves main at 3.5, still
		// above 3.3.
		{name: "max moves", load: map[Slot]float64{1: 2, 2: 1.5, 3: 2.5}, maxMoves: 1, proposals: 1, stop: MaxMoves, hi: "main", lo: "g1", gap: 0.5},
		{name: "balanced after moves", load: map[Slot]float64{1: 1, 3: 1, 5: 1, 7: 1}, proposals: 1, stop: Balanced},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Single("main", nil)
			m.Groups["g1"] = nil
			if err := m.Assign(Slots/2, Slots-1, "g1"); err != nil {
				t.Fatal(err)
			}
			m.Pinned = map[Slot]bool{}
			for _, s := range tt.pinned {
				m.Pinned[s] = true
			}
			var load [Slots]float64
			for s, l := range tt.load {
				load[s] = l
			}
			maxMoves := tt.maxMoves
			if maxMoves == 0 {
				maxMoves = 8
			}
			p := Rebalance(m, &load, 0.1, maxMoves)
			if len(p.Proposals) != tt.proposals || p.Stop != tt.stop {
				t.Fatalf("%d proposals %v, stopped %v; want %d, stopped %v", len(p.Proposals), p.Proposals, p.Stop, tt.proposals, tt.stop)
			}
			if p.Hi != tt.hi || p.Lo != tt.lo || p.Gap != tt.gap || p.Lightest != tt.lite {
				t.Errorf("stopped at hi %q lo %q gap %v lightest %v; want %q %q %v %v", p.Hi, p.Lo, p.Gap, p.Lightest, tt.hi, tt.lo, tt.gap, tt.lite)
			}
		})
	}
}
