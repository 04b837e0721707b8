package agent

import (
	"slices"
	"time"
)

// Kinds of RuleProblem.
const (
	// ProblemOtherRegion: the rule divides its limit among regions that
	// do not include the node's, so it does not apply here.
	ProblemOtherRegion = "other_region"
	// ProblemBroken: the rule cannot be enforced by this agent (a field a
	// newer version added, a configuration its algorithm refuses).
	ProblemBroken = "broken"
)

// RuleProblem is a rule of the set that the agent does not enforce.
type RuleProblem struct {
	Rule    string `json:"rule"`
	Problem string `json:"problem"`
	Reason  string `json:"reason"`
}

// Status is what the agent enforces and how it stands with the
// coordinators: for a sidecar's /v1/status and for dashboards.
type Status struct {
	Node   string `json:"node"`
	Region string `json:"region"`
	Ready  bool   `json:"ready"`
	// RulesVersion is the version of the rule set enforced.
	RulesVersion uint64 `json:"rules_version"`
	// Rules are the rules enforced, in evaluation order.
	Rules []string `json:"rules"`
	// Problems are the set's rules not enforced here, and why.
	Problems []RuleProblem `json:"problems"`
	// Fallback names the rules running on their fail mode.
	Fallback []string `json:"fallback"`
	// Nodes is the fleet size the coordinators last reported.
	Nodes int64 `json:"nodes"`
	// PendingBatches are usage batches sealed and not yet acknowledged.
	PendingBatches int `json:"pending_batches"`
	// LastReport is when a coordinator last answered (zero: never).
	LastReport time.Time `json:"last_report,omitzero"`
}

// Status reports what the agent enforces and how it stands. It reads
// state the reporter owns without stopping it, so the figures are a
// moment's view.
func (a *Agent) Status() Status {
	st := Status{Node: a.cfg.NodeID, Region: a.cfg.Region, Nodes: a.nodes.Load(), Rules: []string{}, Problems: []RuleProblem{}, Fallback: []string{}}
	select {
	case <-a.ready:
		st.Ready = true
	default:
	}
	if c := a.rules.Load(); c != nil {
		st.RulesVersion = c.set.Version()
		st.Problems = slices.Clone(c.problems)
		for _, rs := range c.rules {
			st.Rules = append(st.Rules, rs.rule.Name)
			if rs.fallback.Load() {
				st.Fallback = append(st.Fallback, rs.rule.Name)
			}
		}
	}
	if a.rep != nil {
		st.PendingBatches = int(a.rep.pendingCount.Load())
		if t := a.rep.lastAnswer.Load(); t > 0 {
			st.LastReport = time.Unix(0, t)
		}
	}
	return st
}
