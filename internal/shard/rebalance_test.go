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
	ps := Rebalance(m, &load, 0.05, 10)
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
		for _, p := range Rebalance(m, &load, 0.1, 20) {
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
