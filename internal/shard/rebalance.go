package shard

import (
	"slices"
)

// Proposal is one move a rebalance proposes: slots First..Last from one
// group to another, carrying Load of the measured load.
type Proposal struct {
	First, Last Slot
	From, To    string
	Load        float64
}

// Rebalance proposes moves that bring every group's load within
// tolerance (a fraction) of the mean, by the load measured per slot (key
// entries a second, say). It moves runs of contiguous slots of one owner,
// never a pinned slot, from the most loaded group to the least, each run
// no more than the gap between them, so that no move makes the balance
// worse. It proposes at most max moves; the map is not changed.
func Rebalance(m *Map, load *[Slots]float64, tolerance float64, maxMoves int) []Proposal {
	owner := m.owner
	per := map[string]float64{}
	for g := range m.Groups {
		per[g] = 0
	}
	total := 0.0
	for s, g := range owner {
		per[g] += load[s]
		total += load[s]
	}
	if len(per) < 2 || total == 0 {
		return nil
	}
	mean := total / float64(len(per))
	groups := m.GroupIDs()
	var out []Proposal
	for len(out) < maxMoves {
		hi, lo := groups[0], groups[0]
		for _, g := range groups {
			if per[g] > per[hi] {
				hi = g
			}
			if per[g] < per[lo] {
				lo = g
			}
		}
		if per[hi] <= mean*(1+tolerance) {
			break
		}
		want := min(per[hi]-mean, mean-per[lo])
		p, ok := takeRun(&owner, load, m.Pinned, hi, lo, want)
		if !ok {
			break
		}
		per[hi] -= p.Load
		per[lo] += p.Load
		out = append(out, p)
	}
	return out
}

// takeRun picks, among from's runs of unpinned slots, the slots whose
// load adds up closest to want without passing it (at least one slot
// with load), and gives them to to in owner.
func takeRun(owner *[Slots]string, load *[Slots]float64, pinned map[Slot]bool, from, to string, want float64) (Proposal, bool) {
	best := Proposal{}
	found := false
	for s := 0; s < Slots; {
		if owner[s] != from || pinned[Slot(s)] {
			s++
			continue
		}
		// A run of from's unpinned slots starting at s: grow it while
		// its load stays within want.
		sum, e := 0.0, s
		for e < Slots && owner[e] == from && !pinned[Slot(e)] && sum+load[e] <= want {
			sum += load[e]
			e++
		}
		if sum > 0 && (!found || sum > best.Load) {
			best, found = Proposal{First: Slot(s), Last: Slot(e - 1), From: from, To: to, Load: sum}, true
		}
		s = max(e, s+1)
	}
	if !found {
		return Proposal{}, false
	}
	for s := best.First; s <= best.Last; s++ {
		owner[s] = to
	}
	return best, true
}

// GroupLoads sums a per-slot load by group, in group order.
func GroupLoads(m *Map, load *[Slots]float64) (groups []string, loads []float64) {
	per := map[string]float64{}
	for s, g := range m.owner {
		per[g] += load[s]
	}
	groups = m.GroupIDs()
	for _, g := range groups {
		loads = append(loads, per[g])
	}
	return groups, slices.Clip(loads)
}
