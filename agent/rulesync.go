package agent

import (
	"fmt"
	"time"

	"github.com/allot-io/allot/lease/rules"
	allotpb "github.com/allot-io/allot/proto"
)

// installRules enforces a new rule set from the coordinators. Usage counted
// under the old set is cut first and drained at the next cuts, so none is
// lost. A rule this agent cannot read (a newer version's feature) is left
// out and reported, and the others are enforced.
func (r *reporter) installRules(p *allotpb.RuleSet) {
	a := r.a
	var good []rules.Rule
	var problems []RuleProblem
	for i, pr := range p.GetRules() {
		rule, err := rules.FromProto(pr)
		if err != nil {
			name := pr.GetName()
			if name == "" {
				name = fmt.Sprintf("#%d", i+1)
			}
			problems = append(problems, RuleProblem{Rule: name, Problem: ProblemBroken, Reason: err.Error()})
			continue
		}
		good = append(good, rule)
	}
	set, err := rules.NewSet(p.GetVersion(), good)
	if err != nil {
		a.log.Error("coordinator sent rules this agent cannot enforce; keeping the current ones", "version", p.GetVersion(), "error", err)
		return
	}
	old := a.rules.Load()
	r.cut(time.Unix(0, a.clock.now()))
	if err := a.install(set, problems, false); err != nil {
		a.log.Error("cannot enforce the new rules; keeping the current ones", "version", p.GetVersion(), "error", err)
		return
	}
	if old != nil {
		r.retired = append(r.retired, retiredSet{old, retireCuts})
	}
	r.version = set.Version()
	a.log.Info("rules updated", "version", set.Version(), "rules", set.Len())
}

// reshare resizes every unleased share after the number of nodes changed.
func (r *reporter) reshare() {
	a := r.a
	c := a.rules.Load()
	if c == nil {
		return
	}
	nodes := int(a.nodes.Load())
	for _, rs := range c.rules {
		if !rs.coordinated {
			continue
		}
		for _, st := range rs.stores() {
			st.setShare(&rs.rule, rs.shareOf(st.limit, a.cfg.Region, nodes), time.Unix(0, a.clock.now()))
		}
	}
}
