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

// Plan is what Rebalance proposes, and why it proposes no more.
type Plan struct {
	Proposals []Proposal
	// Stop is why the proposals end where they do.
	Stop Stop
	// Mean is the mean load of a group. When the plan stops short of
	// balance, Hi is the most loaded group then and Lo the least, Gap
	// the most load a move from Hi to Lo may carry (neither passes the
	// mean), and Lightest the load of Hi's lightest movable slot (0 when
	// it has none).
	Mean          float64
	Hi, Lo        string
	Gap, Lightest float64
}

// Stop is why a rebalance proposes no more moves.
type Stop int

const (
	// Balanced: every group is within the tolerance of the mean.
	Balanced Stop = iota
	// NoLoad: no load was measured in any group.
	NoLoad
	// NoFit: the most loaded group is above the tolerance, but each of
	// its unpinned slots with load carries more than the gap, so moving
	// any would take it below the mean or the least loaded above it.
	NoFit
	// AllPinned: the most loaded group's load is all in pinned slots.
	AllPinned
	// MaxMoves: the moves proposed reached the most asked for.
	MaxMoves
)

// Rebalance proposes moves that bring every group's load within
// tolerance (a fraction) of the mean, by the load measured per slot (key
// entries a second, say). It moves runs of contiguous slots of one owner,
// never a pinned slot, from the most loaded group to the least, each run
// no more than the gap between them, so that no move makes the balance
// worse. It proposes at most max moves, and says why it stops; the map
// is not changed.
func Rebalance(m *Map, load *[Slots]float64, tolerance float64, maxMoves int) Plan {
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
		return Plan{Stop: NoLoad}
	}
	plan := Plan{Mean: total / float64(len(per))}
	groups := m.GroupIDs()
	for {
		hi, lo := groups[0], groups[0]
		for _, g := range groups {
			if per[g] > per[hi] {
				hi = g
			}
			if per[g] < per[lo] {
				lo = g
			}
		}
		if per[hi] <= plan.Mean*(1+tolerance) {
			plan.Stop = Balanced
			return plan
		}
		gap := min(per[hi]-plan.Mean, plan.Mean-per[lo])
		if len(plan.Proposals) == maxMoves {
			plan.Stop, plan.Hi, plan.Lo, plan.Gap = MaxMoves, hi, lo, gap
			return plan
		}
		p, ok := takeRun(&owner, load, m.Pinned, hi, lo, gap)
		if !ok {
			plan.Stop, plan.Hi, plan.Lo, plan.Gap = NoFit, hi, lo, gap
			plan.Lightest = lightest(&owner, load, m.Pinned, hi)
			if plan.Lightest == 0 {
				plan.Stop = AllPinned
			}
			return plan
		}
		per[hi] -= p.Load
		per[lo] += p.Load
		plan.Proposals = append(plan.Proposals, p)
	}
}

// lightest is the load of group's lightest unpinned slot with load, or 0.
func lightest(owner *[Slots]string, load *[Slots]float64, pinned map[Slot]bool, group string) float64 {
	out := 0.0
	for s := range owner {
		if owner[s] == group && !pinned[Slot(s)] && load[s] > 0 && (out == 0 || load[s] < out) {
			out = load[s]
		}
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
