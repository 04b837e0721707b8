package lease

import (
	"fmt"
	"strings"
	"testing"

	"github.com/allot-io/allot/internal/scenario"
)

// TestScenarios runs the scripts in testdata/ (see internal/scenario; run
// with -rewrite to rewrite their expected output, then review the diff).
// `allocate` and `fair` divide the pool, after running the lines that
// follow them, which change the pool and its nodes:
//
//	pool limit=120 tolerance=0.05 strategy=proportional|even_split learning=false
//	class NAME weight=W priority=P|exempt   (the nodes below belong to it)
//	node NAME demand=D held=H committed=C absent
//	observe NAME admitted=A denied=D interval=1s period=1s
//	hold                                    (every node now holds its grant)
//
// `allocate` prints each node's grant; `fair` each class's share and its
// nodes' grants.
func TestScenarios(t *testing.T) {
	scenario.Run(t, "testdata/*.txt", func(*testing.T) scenario.Commands {
		sc := &poolScenario{pool: Pool{Strategy: Proportional}}
		return sc.commands()
	})
}

type scenarioNode struct {
	name  string
	class string
	claim Claim
	est   float64
}

type poolScenario struct {
	pool    Pool
	nodes   []*scenarioNode
	classes []*Class
	names   []string // class names, parallel to classes
	class   string   // current class for new nodes
}

func (sc *poolScenario) commands() scenario.Commands {
	setup := scenario.Commands{
		"pool":    {Keys: []string{"limit", "tolerance", "strategy", "learning"}, Required: []string{"limit"}, Run: sc.setPool},
		"class":   {Positional: []string{"name"}, Keys: []string{"weight", "priority"}, Run: sc.setClass},
		"node":    {Positional: []string{"name"}, Keys: []string{"demand", "held", "committed"}, Flags: []string{"absent"}, Run: sc.setNode},
		"observe": {Positional: []string{"name"}, Keys: []string{"admitted", "denied", "interval", "period"}, Required: []string{"interval", "period"}, Run: sc.observe},
		"hold": {Run: func(*scenario.Call) (string, error) {
			for _, n := range sc.nodes {
				n.claim.Held = n.claim.Grant
			}
			return "", nil
		}},
	}
	divide := func(fair bool) func(c *scenario.Call) (string, error) {
		return func(c *scenario.Call) (string, error) {
			if _, err := c.Lines(setup); err != nil {
				return "", err
			}
			if fair {
				sc.fair()
			} else {
				sc.allocate()
			}
			return sc.report(), nil
		}
	}
	return scenario.Commands{
		"allocate": {Input: true, Run: divide(false)},
		"fair":     {Input: true, Run: divide(true)},
	}
}

func (sc *poolScenario) setPool(c *scenario.Call) (string, error) {
	sc.pool.Limit = c.Float("limit", 0)
	sc.pool.Tolerance = c.Float("tolerance", 0)
	sc.pool.Learning = c.Choice("learning", "false", "true", "false") == "true"
	sc.pool.Strategy = Proportional
	if c.Choice("strategy", "proportional", "proportional", "even_split") == "even_split" {
		sc.pool.Strategy = EvenSplit
	}
	return "", nil
}

func (sc *poolScenario) setClass(c *scenario.Call) (string, error) {
	name := c.Arg(0)
	sc.class = name
	prio := PriorityExempt
	if c.String("priority", "0") != "exempt" {
		p := c.Int("priority", 0)
		if p < 0 || p >= int64(PriorityExempt) {
			return "", fmt.Errorf("priority=%d: want 0 to %d, or exempt", p, PriorityExempt-1)
		}
		prio = Priority(p)
	}
	weight := c.Float("weight", 1)
	for i, n := range sc.names {
		if n == name {
			sc.classes[i].Weight, sc.classes[i].Priority = weight, prio
			return "", nil
		}
	}
	sc.names = append(sc.names, name)
	sc.classes = append(sc.classes, &Class{Weight: weight, Priority: prio})
	return "", nil
}

func (sc *poolScenario) setNode(c *scenario.Call) (string, error) {
	n := sc.find(c.Arg(0), sc.class)
	if n == nil {
		n = &scenarioNode{name: c.Arg(0), class: sc.class}
		sc.nodes = append(sc.nodes, n)
	}
	n.claim.Present = !c.Flag("absent")
	n.claim.Demand = c.Float("demand", n.claim.Demand)
	n.est = n.claim.Demand
	n.claim.Held = c.Float("held", n.claim.Held)
	n.claim.Committed = c.Float("committed", n.claim.Committed)
	return "", nil
}

func (sc *poolScenario) observe(c *scenario.Call) (string, error) {
	n := sc.find(c.Arg(0), sc.class)
	if n == nil {
		return "", fmt.Errorf("no node %s in class %q", c.Arg(0), sc.class)
	}
	obs := Observation{Admitted: c.Float("admitted", 0), Denied: c.Float("denied", 0), Interval: c.Duration("interval", 0)}
	n.est = DefaultEstimator().Next(n.est, obs, c.Duration("period", 0))
	n.claim.Demand = n.est
	return "", nil
}

func (sc *poolScenario) allocate() {
	claims := sc.claims("")
	Allocate(sc.pool, claims)
	sc.store(claims, "")
}

func (sc *poolScenario) fair() {
	var a Allocator
	classes := make([]Class, len(sc.classes))
	for i, c := range sc.classes {
		classes[i] = *c
		classes[i].Claims = sc.claims(sc.names[i])
	}
	a.AllocateFair(sc.pool, classes)
	for i := range classes {
		sc.store(classes[i].Claims, sc.names[i])
		sc.classes[i].Share = classes[i].Share
	}
}

func (sc *poolScenario) find(name, class string) *scenarioNode {
	for _, n := range sc.nodes {
		if n.name == name && n.class == class {
			return n
		}
	}
	return nil
}

func (sc *poolScenario) claims(class string) []Claim {
	var cs []Claim
	for i, n := range sc.nodes {
		if n.class == class {
			c := n.claim
			c.Node = int32(i)
			cs = append(cs, c)
		}
	}
	return cs
}

func (sc *poolScenario) store(claims []Claim, class string) {
	j := 0
	for _, n := range sc.nodes {
		if n.class == class {
			n.claim.Grant = claims[j].Grant
			j++
		}
	}
}

func (sc *poolScenario) report() string {
	var b strings.Builder
	total := 0.0
	if len(sc.classes) == 0 {
		for _, n := range sc.nodes {
			fmt.Fprintf(&b, "%s %.2f\n", n.name, n.claim.Grant)
			total += n.claim.Grant
		}
	} else {
		for i, c := range sc.classes {
			fmt.Fprintf(&b, "%s %.2f:", sc.names[i], c.Share)
			for _, n := range sc.nodes {
				if n.class == sc.names[i] {
					fmt.Fprintf(&b, " %s %.2f", n.name, n.claim.Grant)
				}
			}
			b.WriteString("\n")
			total += c.Share
		}
	}
	fmt.Fprintf(&b, "total %.2f\n", total)
	return b.String()
}
