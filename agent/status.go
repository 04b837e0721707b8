package agent

import "time"

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
	// Ready is set once the agent enforces rules, whichever: the
	// sidecar's /readyz.
	Ready bool `json:"ready"`
	// RulesSource is where the rules enforced come from: "cluster" (the
	// coordinators'), "static" (Config.Rules, --rules), "cache" (the rules
	// cache, until the cluster's arrive), "until_rules" (the start-up
	// rules of UntilRulesStatic, until then) or "none" (UntilRules
	// decides every check).
	RulesSource string `json:"rules_source"`
	// RulesReady is set when RulesSource is cluster or static: the gauge
	// allot_agent_rules_ready.
	RulesReady bool `json:"rules_ready"`
	// UntilRules is the start-up policy of an agent taking the
	// cluster's rules: closed, open or static.
	UntilRules string `json:"until_rules,omitempty"`
	// ReportsRefused is set while the coordinators refuse the agent's
	// reports for its credential: the cause, and what to fix.
	ReportsRefused *ReportRefusal `json:"reports_refused,omitempty"`
	// ReportError is the last report's failure, until one is answered.
	ReportError string `json:"report_error,omitempty"`
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
	// ClockOffsetSeconds is what the agent adds to its clock to agree with
	// the coordinators' (window boundaries and billing windows follow
	// theirs), as the last answer showed: the gauge
	// allot_agent_clock_offset_seconds.
	ClockOffsetSeconds float64 `json:"clock_offset_seconds"`
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
	c := a.rules.Load()
	st.RulesSource = sourceOf(c).String()
	st.RulesReady = a.rulesReady()
	if c != nil {
		st.RulesVersion = c.set.Version()
		st.Problems = append(st.Problems, c.problems...)
		for _, rs := range c.rules {
			st.Rules = append(st.Rules, rs.rule.Name)
			if rs.fallback.Load() {
				st.Fallback = append(st.Fallback, rs.rule.Name)
			}
		}
	}
	if a.rep != nil && len(a.cfg.Rules) == 0 {
		st.UntilRules = a.cfg.UntilRules.String()
	}
	if a.rep != nil {
		st.ReportsRefused = a.rep.refusal.Load()
		if e := a.rep.lastError.Load(); e != nil {
			st.ReportError = *e
		}
		st.PendingBatches = int(a.rep.pendingCount.Load())
		if t := a.rep.lastAnswer.Load(); t > 0 {
			st.LastReport = time.Unix(0, t)
		}
	}
	st.ClockOffsetSeconds = a.clock.offsetSeconds()
	return st
}
