package lease

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

// TestWholeUnits: the divisions a window pool's nodes are sent, where a
// node enforces its grant as a whole count.
func TestWholeUnits(t *testing.T) {
	tests := []struct {
		name   string
		pool   Pool
		claims []Claim // Grant as the fractional division left it
		want   []float64
	}{
		{
			// Rounded to nearest, 6 + 6 of a limit of 10.
			name:   "the hand-over room is no whole unit",
			pool:   Pool{Limit: 10, Tolerance: 0.05},
			claims: []Claim{{Node: 0, Present: true, Held: 5, Committed: 5, Grant: 5}, {Node: 1, Present: true, Held: 5, Committed: 5, Grant: 5.5}},
			want:   []float64{5, 5},
		},
		{
			// Rounded down, 3 + 3 + 3 of 10.
			name:   "three thirds hand out the tenth unit",
			pool:   Pool{Limit: 10},
			claims: []Claim{{Node: 0, Present: true, Grant: 10.0 / 3}, {Node: 1, Present: true, Grant: 10.0 / 3}, {Node: 2, Present: true, Grant: 10.0 / 3}},
			want:   []float64{4, 3, 3},
		},
		{
			name:   "the largest fraction first",
			pool:   Pool{Limit: 10},
			claims: []Claim{{Node: 0, Present: true, Grant: 2.2}, {Node: 1, Present: true, Grant: 3.7}, {Node: 2, Present: true, Grant: 4.1}},
			want:   []float64{2, 4, 4},
		},
		{
			name:   "a share below one is one, never the unleased share",
			pool:   Pool{Limit: 1},
			claims: []Claim{{Node: 0, Present: true, Grant: 0.4}, {Node: 1, Present: true, Grant: 0.6}},
			want:   []float64{1, 1},
		},
		{
			name:   "no unit for a node that did not report",
			pool:   Pool{Limit: 10},
			claims: []Claim{{Node: 0, Present: false, Held: 2, Grant: 2.5}, {Node: 1, Present: true, Grant: 7.5}},
			want:   []float64{2, 8},
		},
		{
			// A lease from before grants were whole can hold a fraction.
			name:   "learning grants no more than is held",
			pool:   Pool{Limit: 5, Learning: true},
			claims: []Claim{{Node: 0, Present: true, Held: 2.5, Grant: 2.5}, {Node: 1, Present: true, Held: 3, Grant: 2.5}},
			want:   []float64{2, 3},
		},
		{
			// Node 1 still holds 6 until it hears of its decrease:
			// raising node 0 to 5 would let 11 be outstanding of a room
			// of 10, so the unit stays with node 1.
			name:   "within the hand-over guard",
			pool:   Pool{Limit: 10},
			claims: []Claim{{Node: 0, Present: true, Held: 4, Grant: 4.5}, {Node: 1, Present: true, Held: 6, Grant: 5.5}},
			want:   []float64{4, 6},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			claims := append([]Claim(nil), tt.claims...)
			wholeUnits(tt.pool, []Class{{Claims: claims}})
			for i, c := range claims {
				if c.Grant != tt.want[i] {
					t.Fatalf("grants %v, want %v", grants(claims), tt.want)
				}
			}
		})
	}
}

func grants(claims []Claim) []float64 {
	out := make([]float64, len(claims))
	for i, c := range claims {
		out[i] = c.Grant
	}
	return out
}

// TestPropertyWholeUnits checks, over random window fleets whose nodes
// hold and have spent whole counts, that a Whole pool's division is the
// fractional one in whole units: every grant whole and within a unit of
// its fraction, a positive fraction never 0, no more outstanding than the
// hand-over guard let the fractions have, nothing above what a learning
// node holds, and no unit held back that the guard and learning allowed.
func TestPropertyWholeUnits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := genFleet(t)
		p := f.pool
		p.Shares = true
		for i := range f.claims {
			c := &f.claims[i]
			c.Held, c.Committed = math.Floor(c.Held), math.Floor(c.Committed)
			c.Held = max(c.Held, c.Committed)
		}
		frac := append([]Claim(nil), f.claims...)
		Allocate(p, frac)
		p.Whole = true
		whole := append([]Claim(nil), f.claims...)
		Allocate(p, whole)

		room := p.Limit * (1 + p.Tolerance)
		var fracSum, fracOut, wholeOut, lifts float64
		for i := range whole {
			g, w, c := frac[i].Grant, whole[i].Grant, &whole[i]
			fracSum += g
			fracOut += max(c.outstanding(), g)
			wholeOut += max(c.outstanding(), w)
			if w != math.Floor(w) {
				t.Fatalf("node %d granted %v, not a whole count", i, w)
			}
			if g > 0 && w == 0 {
				t.Fatalf("node %d granted 0 for a fraction of %v: its unleased share", i, g)
			}
			if g > 0 && g < 1 && w == 1 {
				lifts++
			} else if w < math.Floor(g+wholeEps) || w > math.Floor(g+wholeEps)+1 {
				t.Fatalf("node %d granted %v for a fraction of %v", i, w, g)
			}
			if !c.Present && w > math.Floor(g+wholeEps) {
				t.Fatalf("absent node %d raised to %v from %v", i, w, g)
			}
			if p.Learning && w > max(c.Held, 1) {
				t.Fatalf("learning: node %d granted %v, holds %v", i, w, c.Held)
			}
		}
		if wholeOut > max(room, fracOut)+lifts+1e-6 {
			t.Fatalf("Σ max(outstanding, grant) = %v, fractions %v, room %v, %v lifted to 1", wholeOut, fracOut, room, lifts)
		}
		// Short of the fractions' whole units only where no unit could go.
		wholeSum := 0.0
		for _, c := range whole {
			wholeSum += c.Grant
		}
		if wholeSum+1 <= math.Floor(fracSum+wholeEps) {
			for i := range whole {
				c := &whole[i]
				if !c.Present || c.Grant >= frac[i].Grant-wholeEps {
					continue
				}
				up := c.Grant + 1
				if p.Learning && up > c.Held {
					continue
				}
				if wholeOut+max(up-max(c.outstanding(), c.Grant), 0) <= room+1e-6 {
					t.Fatalf("%v of the fractions' %v granted, and node %d (fraction %v) could take a unit", wholeSum, fracSum, i, frac[i].Grant)
				}
			}
		}
	})
}
