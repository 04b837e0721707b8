package agent

import (
	"errors"
	"fmt"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
)

// setFromProto converts the coordinators' rule set. A rule this agent
// cannot read (a newer version's feature) is left out and listed among
// the problems; the error is for a set it cannot build at all.
//
// A field this version does not know makes the rule one it cannot read:
// enforced without it, the rule would be another rule (a monthly cycle
// read by an agent that knows no cycles would count 720-hour windows from
// the Unix epoch).
func setFromProto(p *allotpb.RuleSet) (*rules.Set, []RuleProblem, error) {
	var good []rules.Rule
	var problems []RuleProblem
	for i, pr := range p.GetRules() {
		rule, err := rulespb.FromProto(pr)
		if err == nil && unknownFields(pr) {
			err = errors.New("the rule has fields this agent's version does not know (a newer version's rule): upgrade the agent to enforce it")
		}
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
	return set, problems, err
}

// unknownFields reports whether a wire rule, or its cycle, carries fields
// this version does not know.
func unknownFields(pr *allotpb.Rule) bool {
	if len(pr.ProtoReflect().GetUnknown()) > 0 {
		return true
	}
	c := pr.GetCycle()
	return c != nil && len(c.ProtoReflect().GetUnknown()) > 0
}

// installRules enforces a new rule set from the coordinators. Usage counted
// under the old set is cut first and drained at the next cuts, so none is
// lost. A rule this agent cannot read (a newer version's feature) is left
// out and reported, and the others are enforced. With a rules cache, the
// set is written to it.
func (r *reporter) installRules(p *allotpb.RuleSet) {
	a := r.a
	set, problems, err := setFromProto(p)
	if err != nil {
		a.log.Error("coordinator sent rules this agent cannot enforce; keeping the current ones", "version", p.GetVersion(), "error", err)
		return
	}
	old := a.rules.Load()
	r.cut(time.Unix(0, a.clock.now()))
	if err := a.install(set, problems, false, sourceCluster); err != nil {
		a.log.Error("cannot enforce the new rules; keeping the current ones", "version", p.GetVersion(), "error", err)
		return
	}
	if old != nil {
		r.retired = append(r.retired, retiredSet{old, retireCuts})
	}
	r.version = set.Version()
	// Rules new or changed start with empty tenant tables.
	for _, rs := range a.rules.Load().rules {
		if rs.overrides.n.Load() == 0 && len(r.overrides.byRule[rs.rule.Name]) > 0 {
			rs.fillOverrides(&r.overrides)
		}
	}
	if old == nil || old.source != sourceCluster {
		a.log.Info("the cluster's rules arrived", "version", set.Version(), "rules", set.Len(), "until_now", sourceOf(old).String())
	} else {
		a.log.Info("rules updated", "version", set.Version(), "rules", set.Len())
	}
	r.cacheRules(p)
}

// sourceOf is where c's rules came from; none when there is no c.
func sourceOf(c *compiled) rulesSource {
	if c == nil {
		return sourceNone
	}
	return c.source
}

// cacheRules writes the cluster's set p to the rules cache, if there is
// one: at once for a new set, and at most once a minute for a new fleet
// size alone (p nil), which changes the shares a restarted node starts on,
// or to try again after a failed write.
func (r *reporter) cacheRules(p *allotpb.RuleSet) {
	a := r.a
	if a.cfg.RulesCacheFile == "" {
		return
	}
	now := time.Now()
	if p == nil {
		if r.cached == nil || !r.cacheStale && r.cachedNodes == a.nodes.Load() || now.Sub(r.cachedAt) < time.Minute {
			return
		}
		p = r.cached
	}
	doc, err := a.newRulesCache(p, a.nodes.Load(), now)
	if err == nil {
		err = writeRulesCache(a.cfg.RulesCacheFile, doc)
	}
	r.cached, r.cachedAt, r.cacheStale = p, now, err != nil
	if err != nil {
		a.log.Error("cannot write the rules cache: a restart while the coordinators are out of reach will not have these rules", "error", err)
		return
	}
	r.cachedNodes = doc.Nodes
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
			st.setShare(rs, rs.shareOf(st.limit, a.cfg.Region, nodes), rs.limiterTime(a.clock.now()))
		}
	}
}
