package lease

import (
	"cmp"
	"slices"
)

// Priority orders the traffic of a global capacity rule for shedding: when
// the rule is the limit being hit, lower priorities are refused first. The
// agent composes it from the request's priority and the tenant's plan, so
// that, say, a free tenant's interactive request sorts below a paid one's.
type Priority uint8

// PriorityExempt traffic is never shed by a capacity rule (health checks,
// payment callbacks). It is still counted: what it uses is taken from the
// capacity before anything else is shared out.
const PriorityExempt Priority = 255

// Class is one tenant at one priority within a global pool: the unit that
// receives a fair share, which is then divided among the class's nodes.
type Class struct {
	// Weight is the tenant's weight for max-min fairness; zero or less
	// counts as 1.
	Weight   float64
	Priority Priority
	// Claims are the nodes carrying this class's traffic.
	Claims []Claim
	// Share is the result: the class's total grant.
	Share float64
}

// Allocator holds scratch space so that repeated fair allocations allocate
// nothing. The zero value is ready to use; it is not safe for concurrent
// use.
type Allocator struct {
	order     []int32
	demand    []float64 // per class
	share     []float64 // per class
	perWeight []float64 // per class: demand ÷ weight, for water-filling
	byNode    []float64 // per node: demand (EvenSplit)
	classes   []float64 // per node: classes carried (EvenSplit)
}

// AllocateFair divides p among classes in one pass, writing every claim's
// Grant and every class's Share.
//
// First, exempt classes are given their demand, which is taken off the
// limit. Then priorities are served from the highest down: a priority whose
// classes together want no more than what is left gets all it wants; the
// first that wants more shares what is left by weighted max-min fairness
// (each class gets min(demand, λ·weight), with λ chosen to use it all), and
// every lower priority gets nothing. What is left after everyone is served
// is spread as headroom, half in proportion to demand and half by weight.
// Finally each class's share is divided among its nodes by demand, as
// Allocate does, and the hand-over guard is applied across the whole pool
// (then, for a Whole pool, whole units across all of its claims).
//
// Under EvenSplit the classes are ignored: every node gets Limit ÷ nodes,
// divided among its classes in proportion to its own demand for each.
func (a *Allocator) AllocateFair(p Pool, classes []Class) {
	p = p.learned(classes)
	if p.Strategy == EvenSplit {
		a.evenSplitFair(p.Limit, classes)
	} else {
		a.proportionalFair(p.Limit, classes)
	}
	guard(p, classes)
	if p.Whole {
		wholeUnits(p, classes)
	}
	for i := range classes {
		s := 0.0
		for _, c := range classes[i].Claims {
			s += c.Grant
		}
		classes[i].Share = s
	}
}

func (a *Allocator) proportionalFair(limit float64, classes []Class) {
	n := len(classes)
	a.demand = resize(a.demand, n)
	a.share = resize(a.share, n)
	budget := clean(limit)
	for i := range classes {
		d, committed := 0.0, 0.0
		for _, c := range classes[i].Claims {
			committed += clean(c.Committed)
			if c.Present {
				d += clean(c.Demand)
			}
		}
		a.demand[i], a.share[i] = d, 0
		budget -= committed
		if classes[i].Priority == PriorityExempt {
			a.share[i] = d
			budget -= d
		}
	}
	budget = clean(budget)

	// Serve priorities from the highest down.
	a.order = a.order[:0]
	for i := range classes {
		if classes[i].Priority != PriorityExempt {
			a.order = append(a.order, int32(i))
		}
	}
	slices.SortStableFunc(a.order, func(x, y int32) int {
		return cmp.Compare(classes[y].Priority, classes[x].Priority)
	})
	for start := 0; start < len(a.order) && budget > 0; {
		end := start
		want := 0.0
		for end < len(a.order) && classes[a.order[end]].Priority == classes[a.order[start]].Priority {
			want += a.demand[a.order[end]]
			end++
		}
		band := a.order[start:end]
		if want <= budget {
			for _, i := range band {
				a.share[i] = a.demand[i]
			}
			budget -= want
		} else {
			a.waterfill(budget, band, classes)
			budget = 0
		}
		start = end
	}

	// Spread what is left as headroom.
	if budget > 0 && len(a.order) > 0 {
		totalDemand, totalWeight := 0.0, 0.0
		for _, i := range a.order {
			totalDemand += a.demand[i]
			totalWeight += weight(classes[i])
		}
		for _, i := range a.order {
			extra := budget * (weight(classes[i]) / totalWeight)
			if totalDemand > 0 {
				extra = 0.5*extra + 0.5*budget*(a.demand[i]/totalDemand)
			}
			a.share[i] += extra
		}
	}

	// Divide each class's share among its nodes.
	for i := range classes {
		committed := 0.0
		for _, c := range classes[i].Claims {
			committed += clean(c.Committed)
		}
		split(a.share[i]+committed, classes[i].Claims, false)
	}
}

// waterfill gives the classes of one priority band weighted max-min fair
// shares of budget: classes are visited from the smallest demand per
// weight up; each is given its demand while that is below its weighted
// share of what is left, and once one is not, it and all the rest share
// what is left by weight.
func (a *Allocator) waterfill(budget float64, band []int32, classes []Class) {
	a.perWeight = resize(a.perWeight, len(classes))
	totalWeight := 0.0
	for _, i := range band {
		w := weight(classes[i])
		a.perWeight[i] = a.demand[i] / w
		totalWeight += w
	}
	slices.SortStableFunc(band, func(x, y int32) int { return cmp.Compare(a.perWeight[x], a.perWeight[y]) })
	for k, i := range band {
		w := weight(classes[i])
		if fair := budget * (w / totalWeight); a.demand[i] > fair {
			for _, j := range band[k:] {
				a.share[j] = budget * (weight(classes[j]) / totalWeight)
			}
			return
		}
		a.share[i] = a.demand[i]
		budget -= a.demand[i]
		totalWeight -= w
	}
}

func (a *Allocator) evenSplitFair(limit float64, classes []Class) {
	nodes := int32(0)
	for i := range classes {
		for _, c := range classes[i].Claims {
			if c.Present {
				nodes = max(nodes, c.Node+1)
			}
		}
	}
	// Per node: its total demand, and how many classes it carries.
	a.byNode = resize(a.byNode, int(nodes))
	a.classes = resize(a.classes, int(nodes))
	clear(a.byNode)
	clear(a.classes)
	present := 0
	for i := range classes {
		for _, c := range classes[i].Claims {
			if c.Present {
				if a.classes[c.Node] == 0 {
					present++
				}
				a.classes[c.Node]++
				a.byNode[c.Node] += clean(c.Demand)
			}
		}
	}
	perNode := 0.0
	if present > 0 {
		perNode = clean(limit) / float64(present)
	}
	for i := range classes {
		for j := range classes[i].Claims {
			c := &classes[i].Claims[j]
			switch {
			case !c.Present:
				c.Grant = 0
			case a.byNode[c.Node] > 0:
				c.Grant = perNode * (clean(c.Demand) / a.byNode[c.Node])
			default:
				c.Grant = perNode / a.classes[c.Node]
			}
		}
	}
}

func weight(c Class) float64 {
	if c.Weight > 0 {
		return c.Weight
	}
	return 1
}

func resize(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}
