package lease

import (
	"cmp"
	"math"
	"slices"
)

// wholeEps absorbs the float error of sums that are whole in exact
// arithmetic (three grants of 10/3 add up to 9.999999999999998).
const wholeEps = 1e-9

// wholeUnits makes every grant a whole number of units, for pools whose
// nodes count whole requests (Pool.Whole).
//
// A node enforces a window lease as a whole count, so a fractional grant
// is rounded somewhere, and rounding each grant on its own breaks the
// division either way: rounded to nearest, two grants of 5.5 (a limit of
// 10 with the quota's 5% of hand-over room) let the fleet admit 12; rounded
// down, three grants of 10/3 admit 9 for as long as the division stands,
// and a paying tenant is refused under its quota. Instead each grant is
// rounded down, and the units the fractions add up to (the sum of the
// grants, rounded down) are handed out whole, largest fraction first, to
// nodes that reported, as long as the hand-over guard's bound holds
// (Σ max(outstanding, grant) within Limit × (1 + Tolerance), when it held
// before) and, while learning, no grant exceeds what its node holds. A
// positive grant is never rounded to 0, which would send its node back to
// its unleased share: it is at least 1, as a node enforces any share
// below one.
func wholeUnits(p Pool, classes []Class) {
	type part struct {
		c    *Claim
		frac float64 // what rounding down took from its grant
	}
	var parts []part
	sum, whole, outstanding := 0.0, 0.0, 0.0
	for i := range classes {
		for j := range classes[i].Claims {
			c := &classes[i].Claims[j]
			g := clean(c.Grant)
			sum += g
			w := math.Floor(g + wholeEps)
			if g > 0 {
				w = max(w, 1)
			}
			if g-w > wholeEps && c.Present {
				parts = append(parts, part{c, g - w})
			}
			c.Grant = w
			whole += w
			outstanding += max(c.outstanding(), w)
		}
	}
	left := math.Floor(sum+wholeEps) - whole
	if left < 1 {
		return
	}
	// Largest fraction first; ties go to the smaller node index, so that
	// every replica divides alike.
	slices.SortFunc(parts, func(a, b part) int {
		if r := cmp.Compare(b.frac, a.frac); r != 0 {
			return r
		}
		return cmp.Compare(a.c.Node, b.c.Node)
	})
	room := clean(p.Limit) * (1 + p.Tolerance)
	for _, pt := range parts {
		if left < 1 {
			break
		}
		c := pt.c
		up := c.Grant + 1
		if p.Learning && up > clean(c.Held)+wholeEps {
			continue
		}
		grow := max(up-max(c.outstanding(), c.Grant), 0)
		if grow > 0 && outstanding+grow > room+wholeEps {
			continue
		}
		c.Grant, outstanding, left = up, outstanding+grow, left-1
	}
}
