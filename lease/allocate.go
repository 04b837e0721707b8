package lease

import (
	"fmt"
	"math"
)

// Strategy is how a pool is divided among nodes.
type Strategy uint8

const (
	// Proportional divides the allowance in proportion to demand, with a
	// floor for every node that showed demand: Allot's strategy.
	Proportional Strategy = iota + 1
	// EvenSplit gives every node Limit ÷ nodes whatever its demand. It is
	// kept as a named baseline because it is what a fleet gets without a
	// coordinator, and the simulator shows side by side why it is wrong:
	// load balancing is per connection, so a subject's traffic is rarely
	// spread evenly over the nodes.
	EvenSplit
)

var strategyNames = [...]string{Proportional: "proportional", EvenSplit: "even_split"}

func (s Strategy) String() string {
	if s >= Proportional && s <= EvenSplit {
		return strategyNames[s]
	}
	return fmt.Sprintf("strategy(%d)", uint8(s))
}

// Pool is one global allowance being divided among nodes in one round.
type Pool struct {
	// Limit is the allowance, in the rule's units per period.
	Limit float64
	// Tolerance is the fraction above Limit that the leases outstanding
	// while they change hands may add up to (Intent.DefaultTolerance).
	Tolerance float64
	// Strategy is how the allowance is divided; zero means Proportional.
	Strategy Strategy
	// Learning marks a new leader's first lease period: it knows nothing of
	// what was granted before it, so no node is granted more than the lease
	// it reports holding, and a node holding nothing is granted nothing.
	Learning bool
	// LearnFromBases is the other form of learning mode, for rate rules:
	// the pool divides no more than the claims' Bases add up to (what the
	// nodes held when the new leader first heard from them), and the
	// hand-over guard lets no more than that be outstanding either (nor
	// more than Limit × (1 + Tolerance)), so that demand moving among the
	// nodes is followed while grants the predecessor made to nodes not
	// heard from yet stay covered: the fleet never holds more after a
	// failover than it held before it.
	LearnFromBases bool
	// Shares divides Limit by demand as if nothing had been committed, for
	// window pools: each window starts from a division fixed ahead of it,
	// and a grant that already counted what its node spent would depend on
	// the moment the node reported. Every grant is then raised to at least
	// its claim's Committed (spent units cannot be given back), and the
	// hand-over guard keeps the sum within Limit × (1 + Tolerance).
	Shares bool
	// Whole makes every grant a whole number of units, for pools whose
	// nodes count whole requests (window algorithms): the fractions the
	// division leaves are handed out whole, largest first, within the
	// hand-over guard (see wholeUnits).
	Whole bool
}

// Validate reports whether p can be allocated.
func (p Pool) Validate() error {
	switch {
	case !(p.Limit >= 0) || math.IsInf(p.Limit, 0):
		return fmt.Errorf("%w pool: limit %v must be a finite, non-negative number", ErrInvalid, p.Limit)
	case !(p.Tolerance >= 0 && p.Tolerance <= 1):
		return fmt.Errorf("%w pool: tolerance %v must be between 0 and 1", ErrInvalid, p.Tolerance)
	case p.Strategy > EvenSplit:
		return fmt.Errorf("%w pool: unknown strategy %d", ErrInvalid, uint8(p.Strategy))
	}
	return nil
}

// Claim is one node's part in a pool: what it wants, what it holds, and,
// once allocated, what it is granted. All amounts are in the pool's units.
//
// A node with no lease yet has Held 0. A node that has not reported this
// round (gone quiet, or left) still has a Claim with Present false while its
// lease is unexpired, so that what it may still be spending is counted; it
// is granted nothing new.
type Claim struct {
	// Node identifies the node to the caller; EvenSplit under AllocateFair
	// also uses it to find each node's classes, so it must be a small,
	// dense index there.
	Node int32
	// Present is true when the node reported in this round.
	Present bool
	// Demand is the node's smoothed demand (Estimator).
	Demand float64
	// Held is the lease the node holds now: for window pools, its count for
	// the current window (zero if its lease is for an earlier window).
	Held float64
	// Committed is what the node has already admitted in the current
	// window, for window pools; it cannot be taken back, so every grant
	// includes it. Zero for rate pools.
	Committed float64
	// Base is what the node held when the allocator first heard from it
	// as leader (Pool.LearnFromBases).
	Base float64
	// Grant is the result: the node's new lease.
	Grant float64
}

// floorFraction sets the floor of a node that showed demand in a contended
// pool: the smaller of its demand and this fraction of an even share.
const floorFraction = 0.25

// Allocate divides p among claims, writing each claim's Grant.
//
// Proportional:
//
//	avail = Limit − Σ Committed
//	if Σ Demand ≤ avail: grant = Demand + spare × (½·Demand/ΣDemand + ½/nodes)
//	otherwise:           floor = min(Demand, ¼ · avail / nodes with demand)
//	                     grant = floor + (avail − Σ floor) × (Demand − floor) / Σ (Demand − floor)
//	every grant also includes the node's Committed.
//
// When demand fits, every node gets what it wants and the spare is handed
// out as headroom, half to the busy and half evenly, so an idle node can
// start serving before the next round. When it does not, each node's
// admitted fraction is the same apart from the floor. Either way the grants
// add up to exactly Limit. Then the hand-over guard applies (see the package
// documentation): increases are scaled down so that Σ max(Held, Grant) ≤
// Limit × (1 + Tolerance), and in learning mode Grant ≤ Held. Last, a
// Whole pool's grants are made whole units.
func Allocate(p Pool, claims []Claim) {
	one := [1]Class{{Claims: claims}}
	p = p.learned(one[:])
	if p.Strategy == EvenSplit {
		evenSplit(p.Limit, claims)
	} else {
		split(p.Limit, claims, p.Shares)
	}
	if p.Shares {
		atLeastCommitted(claims)
	}
	guard(p, one[:])
	if p.Whole {
		wholeUnits(p, one[:])
	}
}

// atLeastCommitted raises every present claim's grant to what it has
// already spent.
func atLeastCommitted(claims []Claim) {
	for i := range claims {
		if c := &claims[i]; c.Present {
			c.Grant = max(c.Grant, clean(c.Committed))
		}
	}
}

// learned is the pool as divided: p itself, or under LearnFromBases one
// whose limit is no more than the claims' bases add up to and whose
// tolerance lets no more than the bases be outstanding: the guard's room,
// Limit × (1 + Tolerance), becomes min(Limit × (1 + Tolerance), bases).
// Adding the tolerance on top of bases that already used it let a fleet
// reach (1 + Tolerance)² of the limit while a new leader learned.
func (p Pool) learned(classes []Class) Pool {
	if !p.LearnFromBases {
		return p
	}
	bases := 0.0
	for i := range classes {
		for _, c := range classes[i].Claims {
			bases += clean(c.Base)
		}
	}
	limit := clean(p.Limit)
	if bases <= limit {
		p.Limit, p.Tolerance = bases, 0
	} else {
		p.Tolerance = math.Min(p.Tolerance, bases/limit-1)
	}
	return p
}

// clean returns x if it is a positive, finite amount, and zero otherwise, so
// that a corrupt input can never poison a round with NaN or infinity.
func clean(x float64) float64 {
	if x > 0 && x <= math.MaxFloat64 {
		return x
	}
	return 0
}

// split sets each claim's Grant to its proportional share of budget, on
// top of what it committed unless shares is set (Pool.Shares).
func split(budget float64, claims []Claim, shares bool) {
	var committed, demand float64
	present, active := 0, 0
	spent := func(c *Claim) float64 {
		if shares {
			return 0
		}
		return clean(c.Committed)
	}
	for i := range claims {
		c := &claims[i]
		c.Grant = 0
		committed += spent(c)
		if !c.Present {
			continue
		}
		present++
		if d := clean(c.Demand); d > 0 {
			active++
			demand += d
		}
	}
	if present == 0 {
		return
	}
	avail := clean(budget - committed)
	switch {
	case avail == 0:
		for i := range claims {
			if c := &claims[i]; c.Present {
				c.Grant = spent(c)
			}
		}
	case demand <= avail:
		// Ratios are taken before products throughout, so that tiny or
		// huge amounts cannot overflow to infinity.
		spare := avail - demand
		for i := range claims {
			if c := &claims[i]; c.Present {
				d := clean(c.Demand)
				extra := spare / float64(present)
				if demand > 0 {
					extra = 0.5*extra + 0.5*spare*(d/demand)
				}
				c.Grant = spent(c) + d + extra
			}
		}
	default:
		floor := floorFraction * avail / float64(active)
		floors, excess := 0.0, 0.0
		for i := range claims {
			if c := &claims[i]; c.Present {
				d := clean(c.Demand)
				f := min(d, floor)
				floors += f
				excess += d - f
			}
		}
		// excess > avail − floors ≥ 0 here, because demand > avail.
		rest := avail - floors
		for i := range claims {
			if c := &claims[i]; c.Present {
				d := clean(c.Demand)
				f := min(d, floor)
				c.Grant = spent(c) + f
				if d > f {
					c.Grant += rest * ((d - f) / excess)
				}
			}
		}
	}
}

// evenSplit gives every present claim budget ÷ present claims.
func evenSplit(budget float64, claims []Claim) {
	present := 0
	for i := range claims {
		claims[i].Grant = 0
		if claims[i].Present {
			present++
		}
	}
	if present == 0 {
		return
	}
	share := clean(budget) / float64(present)
	for i := range claims {
		if claims[i].Present {
			claims[i].Grant = share
		}
	}
}

// guard makes grants safe to hand over, counting every claim of the pool
// at once: see Allocate.
func guard(p Pool, classes []Class) {
	if p.Learning {
		for i := range classes {
			learn(classes[i].Claims)
		}
		return
	}
	held, increase := 0.0, 0.0
	for i := range classes {
		h, inc := tally(classes[i].Claims)
		held, increase = held+h, increase+inc
	}
	if scale, ok := guardScale(p, held, increase); ok {
		for i := range classes {
			scaleIncreases(classes[i].Claims, scale)
		}
	}
}

// learn caps every grant at what its node holds.
func learn(claims []Claim) {
	for i := range claims {
		c := &claims[i]
		c.Grant = min(c.Grant, clean(c.Held))
	}
}

// outstanding is what a node may still spend in the current lease: the
// lease it holds, or what it has already spent in the window if that is
// more (a node that failed open can have overspent its lease).
func (c *Claim) outstanding() float64 { return max(clean(c.Held), clean(c.Committed)) }

// tally sums what claims hold and by how much their grants exceed it.
func tally(claims []Claim) (held, increase float64) {
	for i := range claims {
		c := &claims[i]
		h := c.outstanding()
		held += h
		if c.Grant > h {
			increase += c.Grant - h
		}
	}
	return held, increase
}

// guardScale returns the factor increases must be scaled by so that
// Σ max(Held, Grant) = held + increase stays within the pool's room, and
// false if they fit as they are.
func guardScale(p Pool, held, increase float64) (float64, bool) {
	room := clean(p.Limit)*(1+p.Tolerance) - held
	if increase <= room {
		return 1, false
	}
	return clean(room) / increase, true
}

// scaleIncreases scales every grant's increase over its held lease.
func scaleIncreases(claims []Claim, scale float64) {
	for i := range claims {
		c := &claims[i]
		if h := c.outstanding(); c.Grant > h {
			c.Grant = h + (c.Grant-h)*scale
		}
	}
}
