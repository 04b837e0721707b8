package lease

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// fleet draws a random fleet of 1–1000 nodes for one pool.
type fleet struct {
	pool   Pool
	claims []Claim
	window bool // claims carry committed usage
	fresh  bool // nobody holds a lease yet
}

func genFleet(t *rapid.T) fleet {
	f := fleet{pool: Pool{
		Limit:     rapid.Float64Range(1, 1e6).Draw(t, "limit"),
		Tolerance: rapid.SampledFrom([]float64{0, 0.03, 0.05, 0.1}).Draw(t, "tolerance"),
		Learning:  rapid.IntRange(0, 4).Draw(t, "learning") == 0,
	}}
	n := rapid.IntRange(1, 1000).Draw(t, "nodes")
	scale := f.pool.Limit * rapid.SampledFrom([]float64{0.001, 0.01, 0.2, 1, 5}).Draw(t, "demandScale")
	f.window = rapid.Bool().Draw(t, "window")
	f.fresh = rapid.Bool().Draw(t, "fresh")
	f.claims = make([]Claim, n)
	for i := range f.claims {
		c := &f.claims[i]
		c.Node = int32(i)
		c.Present = rapid.IntRange(0, 9).Draw(t, "absent") != 0
		if rapid.IntRange(0, 3).Draw(t, "idle") != 0 {
			c.Demand = rapid.Float64Range(0, 1).Draw(t, "demand") * scale / float64(n)
		}
		if f.window {
			c.Committed = rapid.Float64Range(0, 1).Draw(t, "committed")
		}
		if !f.fresh {
			c.Held = rapid.Float64Range(0, 1).Draw(t, "held")
		}
	}
	// Scale committed usage to at most the limit, and held leases (which
	// include what was committed under them) to what a previous round could
	// have left outstanding: at most Limit × (1+Tolerance).
	committed := f.pool.Limit * rapid.Float64Range(0, 1).Draw(t, "committedFill")
	normalize(f.claims, func(c *Claim) *float64 { return &c.Committed }, committed)
	if !f.fresh {
		normalize(f.claims, func(c *Claim) *float64 { return &c.Held }, (f.pool.Limit*(1+f.pool.Tolerance)-committed)*rapid.Float64Range(0, 1).Draw(t, "heldFill"))
		for i := range f.claims {
			f.claims[i].Held += f.claims[i].Committed
		}
	}
	return f
}

func normalize(claims []Claim, field func(*Claim) *float64, total float64) {
	sum := 0.0
	for i := range claims {
		sum += *field(&claims[i])
	}
	if sum < 1e-12 {
		for i := range claims {
			*field(&claims[i]) = 0
		}
		return
	}
	for i := range claims {
		*field(&claims[i]) *= total / sum
	}
}

const eps = 1e-9

func near(a, b float64) bool {
	return math.Abs(a-b) <= eps*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// TestPropertyAllocate checks, over random fleets, the guarantees the
// coordinator and billing rely on.
func TestPropertyAllocate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := genFleet(t)
		claims := append([]Claim(nil), f.claims...)
		Allocate(f.pool, claims)
		cmax := f.pool.Limit * (1 + f.pool.Tolerance)

		var granted, outstanding, heldSum, demandSum, committedSum float64
		for _, c := range claims {
			granted += c.Grant
			outstanding += math.Max(c.Held, c.Grant)
			heldSum += c.Held
			committedSum += c.Committed
			if c.Present {
				demandSum += c.Demand
			}
			if c.Grant < 0 || math.IsNaN(c.Grant) {
				t.Fatalf("grant %v", c.Grant)
			}
			if !c.Present && c.Grant != 0 {
				t.Fatalf("absent node granted %v", c.Grant)
			}
		}
		// Never more than the limit plus tolerance, in grants or in what
		// may be outstanding while they change hands.
		if granted > cmax*(1+eps) {
			t.Fatalf("granted %v > limit×(1+tol) %v", granted, cmax)
		}
		if !f.pool.Learning && outstanding > cmax*(1+eps) {
			t.Fatalf("Σ max(held, grant) = %v > %v", outstanding, cmax)
		}
		// Learning mode never grants more than was held.
		if f.pool.Learning {
			for i, c := range claims {
				if c.Grant > c.Held*(1+eps) {
					t.Fatalf("learning: node %d granted %v, held %v", i, c.Grant, c.Held)
				}
			}
			return
		}
		// A node with demand never gets nothing beyond what it has spent in
		// the window, while any of the limit is left and the guard has room
		// (it always has with a tolerance, once nodes hold no more than the
		// limit).
		if committedSum < f.pool.Limit*(1-1e-9) && (f.fresh || (f.pool.Tolerance > 0 && heldSum <= f.pool.Limit)) {
			for i, c := range claims {
				if c.Present && c.Demand > 1e-12*f.pool.Limit && c.Grant <= c.Committed {
					t.Fatalf("node %d with demand %v granted %v, no more than its committed %v", i, c.Demand, c.Grant, c.Committed)
				}
			}
		}
		if !f.fresh {
			return
		}
		avail := f.pool.Limit - committedSum
		if demandSum <= avail {
			// Demand fits: everyone gets at least what they want.
			for i, c := range claims {
				if c.Present && c.Grant < (c.Demand+c.Committed)*(1-eps) {
					t.Fatalf("fits, but node %d granted %v < demand %v + committed %v", i, c.Grant, c.Demand, c.Committed)
				}
			}
		} else if avail > 1e-6*f.pool.Limit {
			// Contended: above the floor, grants are proportional to demand.
			active := 0
			for _, c := range claims {
				if c.Present && c.Demand > 0 {
					active++
				}
			}
			floor := floorFraction * avail / float64(active)
			ratio := math.NaN()
			for i, c := range claims {
				if !c.Present || c.Demand <= floor*(1+1e-6) {
					continue
				}
				r := (c.Grant - c.Committed - floor) / (c.Demand - floor)
				if math.IsNaN(ratio) {
					ratio = r
				} else if math.Abs(r-ratio) > 1e-6*math.Max(1, ratio) {
					t.Fatalf("node %d: share ratio %v, others %v", i, r, ratio)
				}
			}
		}
	})
}

// TestPropertyAllocateDeterministic checks that the same input gives
// bit-identical grants, and that the order of the claims does not matter
// beyond rounding.
func TestPropertyAllocateDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := genFleet(t)
		a := append([]Claim(nil), f.claims...)
		b := append([]Claim(nil), f.claims...)
		Allocate(f.pool, a)
		Allocate(f.pool, b)
		for i := range a {
			if a[i].Grant != b[i].Grant {
				t.Fatalf("node %d: %v then %v", i, a[i].Grant, b[i].Grant)
			}
		}
		perm := rapid.Permutation(f.claims).Draw(t, "order")
		Allocate(f.pool, perm)
		for _, c := range perm {
			if want := a[c.Node].Grant; math.Abs(c.Grant-want) > 1e-9*math.Max(1, want) {
				t.Fatalf("node %d: %v in one order, %v in another", c.Node, want, c.Grant)
			}
		}
	})
}

// TestPropertyFair checks the two-level allocation: bounded total, strict
// priority, weighted max-min fairness within the priority that is cut, and
// class shares equal to the sum of their nodes' grants.
func TestPropertyFair(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pool := Pool{Limit: rapid.Float64Range(10, 1e5).Draw(t, "limit"), Tolerance: 0.03}
		nodes := rapid.IntRange(1, 50).Draw(t, "nodes")
		classes := make([]Class, rapid.IntRange(1, 200).Draw(t, "classes"))
		for i := range classes {
			c := &classes[i]
			c.Weight = rapid.Float64Range(0.1, 10).Draw(t, "weight")
			c.Priority = Priority(rapid.IntRange(1, 4).Draw(t, "priority"))
			for n := rapid.IntRange(1, 5).Draw(t, "claims"); n > 0; n-- {
				c.Claims = append(c.Claims, Claim{
					Node:    int32(rapid.IntRange(0, nodes-1).Draw(t, "node")),
					Present: true,
					Demand:  rapid.Float64Range(0, pool.Limit/10).Draw(t, "demand"),
				})
			}
		}
		var a Allocator
		a.AllocateFair(pool, classes)
		total := 0.0
		demand := make([]float64, len(classes))
		for i, c := range classes {
			s := 0.0
			for _, cl := range c.Claims {
				s += cl.Grant
				demand[i] += cl.Demand
			}
			if !near(s, c.Share) {
				t.Fatalf("class %d: share %v, grants add to %v", i, c.Share, s)
			}
			total += c.Share
		}
		if total > pool.Limit*(1+eps) {
			t.Fatalf("total %v over limit %v", total, pool.Limit)
		}
		// Find the highest priority that is cut, if any.
		cut := Priority(0)
		for i, c := range classes {
			if c.Share < demand[i]*(1-1e-9) && c.Priority > cut {
				cut = c.Priority
			}
		}
		if cut == 0 {
			return
		}
		for i, c := range classes {
			switch {
			case c.Priority > cut && c.Share < demand[i]*(1-1e-9):
				t.Fatalf("class %d at priority %d cut while %d is the cut priority", i, c.Priority, cut)
			case c.Priority < cut && c.Share > 1e-9:
				t.Fatalf("class %d at priority %d got %v although priority %d is cut", i, c.Priority, c.Share, cut)
			}
		}
		// Max-min: a cut class's share per weight is at least any other
		// class's in its band.
		for i, c := range classes {
			if c.Priority != cut || c.Share >= demand[i]*(1-1e-9) {
				continue
			}
			for j, o := range classes {
				if o.Priority == cut && c.Share/c.Weight < o.Share/o.Weight*(1-1e-9) {
					t.Fatalf("cut class %d has %v per weight, class %d has %v", i, c.Share/c.Weight, j, o.Share/o.Weight)
				}
			}
		}
	})
}

// round simulates one reporting interval of a fleet at the lease level: each
// node admits what its lease allows of its demand, reports, and receives a
// new lease from Allocate. It returns the fraction of the limit admitted.
func round(pool Pool, est []float64, claims []Claim, demand []float64) float64 {
	admitted := 0.0
	e := DefaultEstimator()
	for i := range claims {
		got := math.Min(demand[i], claims[i].Grant)
		admitted += got
		est[i] = e.Next(est[i], Observation{Admitted: got, Denied: demand[i] - got, Interval: time.Second}, time.Second)
		claims[i].Demand = est[i]
		claims[i].Held = claims[i].Grant
		claims[i].Present = true
	}
	Allocate(pool, claims)
	return admitted / pool.Limit
}

// TestConvergenceShift: a fleet whose demand moves from one node to another
// admits at least 99% of the limit within three rounds of the shift.
func TestConvergenceShift(t *testing.T) {
	pool := Pool{Limit: 1000, Tolerance: Capacity.DefaultTolerance()}
	const nodes = 10
	claims := make([]Claim, nodes)
	est := make([]float64, nodes)
	demand := make([]float64, nodes)
	demand[0] = 2000 // everything on node 0, twice the limit
	for r := 0; r < 10; r++ {
		round(pool, est, claims, demand)
	}
	demand[0], demand[7] = 0, 2000 // the client reconnects to node 7
	var got []float64
	for r := 1; r <= 3; r++ {
		got = append(got, round(pool, est, claims, demand))
	}
	// The interval after round 3's leases.
	got = append(got, round(pool, est, claims, demand))
	if got[3] < 0.99 {
		t.Fatalf("admitted fraction by interval after the shift: %.3f; want ≥ 0.99 within 3 rounds", got)
	}
	t.Logf("admitted ÷ limit per interval after the shift: %.3f", got)
}

// TestPropertyConvergence: for random fleets whose total demand stays above
// the limit while it moves between nodes, three rounds after the shift the
// fleet admits at least 99% of the limit.
func TestPropertyConvergence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pool := Pool{Limit: 1000, Tolerance: rapid.SampledFrom([]float64{0.03, 0.05}).Draw(t, "tolerance")}
		n := rapid.IntRange(2, 100).Draw(t, "nodes")
		claims := make([]Claim, n)
		est := make([]float64, n)
		demand := make([]float64, n)
		draw := func(label string) {
			total := 0.0
			for i := range demand {
				demand[i] = 0
				if rapid.IntRange(0, 2).Draw(t, label) == 0 {
					demand[i] = rapid.Float64Range(0.01, 1).Draw(t, label+"Demand")
					total += demand[i]
				}
			}
			if total == 0 {
				demand[0], total = 1, 1
			}
			want := pool.Limit * rapid.Float64Range(1.5, 4).Draw(t, label+"Total")
			for i := range demand {
				demand[i] *= want / total
			}
		}
		draw("before")
		for r := 0; r < 8; r++ {
			round(pool, est, claims, demand)
		}
		draw("after")
		for r := 0; r < 3; r++ {
			round(pool, est, claims, demand)
		}
		if got := round(pool, est, claims, demand); got < 0.99 {
			t.Fatalf("admitted %.4f of the limit in the interval after 3 rounds", got)
		}
	})
}

// TestPropertyLearnFromBases checks the rate-rule form of learning mode:
// whatever the nodes held when first heard from (their bases), the pool
// never has more outstanding than the bases, nor than the limit plus the
// tolerance. (It once allowed the bases plus the tolerance: up to
// (1 + tolerance)² of the limit.)
func TestPropertyLearnFromBases(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := genFleet(t)
		if f.window {
			t.Skip("window pools learn by Held (Pool.Learning)")
		}
		f.pool.Learning, f.pool.LearnFromBases = false, true
		claims := append([]Claim(nil), f.claims...)
		bases := 0.0
		for i := range claims {
			// A base is what the node held when first heard from; since
			// then it may have given some back, never gained beyond it.
			claims[i].Base = claims[i].Held * rapid.Float64Range(1, 1.5).Draw(t, "base")
			bases += claims[i].Base
		}
		Allocate(f.pool, claims)
		outstanding := 0.0
		for _, c := range claims {
			outstanding += math.Max(c.Held, c.Grant)
		}
		capacity := math.Min(f.pool.Limit*(1+f.pool.Tolerance), bases)
		held := 0.0
		for _, c := range claims {
			held += c.Held
		}
		if outstanding > math.Max(capacity, held)*(1+eps) {
			t.Fatalf("outstanding %v > min(limit × (1+tol), bases %v) = %v", outstanding, bases, capacity)
		}
	})
}
