package agent

import (
	"fmt"

	"github.com/allot-io/allot/rules"
)

// UntilRules is what a coordinated agent does until it has rules: from
// the moment New returns until the cluster's rules arrive with the first
// answered report, or for as long as the coordinators refuse its reports
// (a token naming another node) or cannot be reached. It is never silent:
// the agent logs at ERROR while it lasts, Status says so, and the gauge
// allot_agent_rules_ready is 0 (see docs/operations.md, "Runbook: a
// sidecar without rules").
//
// A rules cache (Config.RulesCacheFile) holding the cluster's last rules
// comes first: an agent that restarts while the coordinators are out of
// reach enforces those, and the policy applies only to an agent that has
// never had the cluster's rules on this host.
type UntilRules uint8

const (
	// UntilRulesClosed refuses every request, with RetryAfter one report
	// interval and Decision.NoRules set (the sidecar answers 429 with
	// Retry-After and "no_rules": true). It is the zero value and the
	// default: an agent that cannot get its rules must not let through
	// what abuse rules exist to stop, and a gateway refusing everything
	// is noticed at once, where one admitting everything is not.
	UntilRulesClosed UntilRules = iota
	// UntilRulesOpen admits every request, with Decision.NoRules set:
	// nothing is limited, abuse rules included.
	UntilRulesOpen
	// UntilRulesStatic enforces Config.StartupRules until the cluster's
	// rules arrive, as a standalone agent does: each node the whole
	// limit, nothing reported or billed. Then the cluster's rules take
	// over.
	UntilRulesStatic
)

var untilRulesNames = [...]string{UntilRulesClosed: "closed", UntilRulesOpen: "open", UntilRulesStatic: "static"}

func (u UntilRules) String() string {
	if int(u) < len(untilRulesNames) {
		return untilRulesNames[u]
	}
	return fmt.Sprintf("UntilRules(%d)", uint8(u))
}

// ParseUntilRules reads a policy's name: closed, open or static.
func ParseUntilRules(s string) (UntilRules, error) {
	for i, name := range untilRulesNames {
		if name == s {
			return UntilRules(i), nil
		}
	}
	return 0, fmt.Errorf("agent: unknown start-up policy %q (want closed, open or static)", s)
}

// rulesSource is where the rule set an agent enforces came from.
type rulesSource uint8

const (
	sourceNone    rulesSource = iota // no rules: UntilRules decides
	sourceStatic                     // Config.Rules, enforced as given
	sourceStartup                    // Config.StartupRules (UntilRulesStatic), until the cluster's
	sourceCache                      // Config.RulesCacheFile, until the cluster's
	sourceCluster                    // the coordinators'
)

var sourceNames = [...]string{sourceNone: "none", sourceStatic: "static", sourceStartup: "until_rules", sourceCache: "cache", sourceCluster: "cluster"}

func (s rulesSource) String() string { return sourceNames[s] }

// standIn reports whether the rules stand in for the cluster's until
// they arrive.
func (s rulesSource) standIn() bool { return s == sourceStartup || s == sourceCache }

// Labels of allot_agent_until_rules_decisions_total, indexing
// Agent.untilDecisions: the checks decided while the agent had no rules
// (by its policy, closed or open) or stand-in rules (static, cache).
var untilDecisionLabels = [...]string{"closed", "open", "static", "cache"}

const (
	untilClosed = iota
	untilOpen
	untilStatic
	untilCache
)

// noRules decides a request with no rules at all, by the policy.
func (a *Agent) noRules(d *Decision) {
	a.untilRules(d)
	if d.Allowed {
		a.untilDecisions[untilOpen].Add(1)
	} else {
		a.untilDecisions[untilClosed].Add(1)
	}
}

// untilRules is noRules' decision, counted nowhere: a peek's.
func (a *Agent) untilRules(d *Decision) {
	d.NoRules = true
	if a.cfg.UntilRules == UntilRulesOpen {
		d.Allowed = true
		return
	}
	d.RetryAfter = a.interval() // rules come with the next answered report
}

// countStandIn counts a decision made by stand-in rules.
func (a *Agent) countStandIn(c *compiled) {
	if c.source == sourceCache {
		a.untilDecisions[untilCache].Add(1)
	} else {
		a.untilDecisions[untilStatic].Add(1)
	}
}

// rulesReady reports whether the agent enforces the rules it is meant to:
// the cluster's, or its static Config.Rules.
func (a *Agent) rulesReady() bool {
	c := a.rules.Load()
	return c != nil && (c.source == sourceStatic || c.source == sourceCluster)
}

// startRules gives a coordinated agent without static rules what it
// enforces until the cluster's rules arrive: its rules cache, else its
// start-up rules, else nothing (UntilRules decides).
func (a *Agent) startRules() error {
	var startup *rules.Set
	if a.cfg.UntilRules == UntilRulesStatic {
		// Checked even when the cache is used: a start without it
		// must not be the first to find them wrong.
		var err error
		if startup, err = rules.NewSet(0, a.cfg.StartupRules); err != nil {
			return fmt.Errorf("agent: start-up rules: %w", err)
		}
	}
	if a.cfg.RulesCacheFile != "" && a.loadRulesCache() {
		return nil
	}
	if startup != nil {
		if err := a.install(startup, nil, true, sourceStartup); err != nil {
			return fmt.Errorf("agent: start-up rules: %w", err)
		}
	}
	a.log.Info("until the cluster's rules arrive", "until_rules", a.cfg.UntilRules.String(), "checks", a.checksNow())
	return nil
}

// checksNow says, for logs, what the agent's checks get now.
func (a *Agent) checksNow() string {
	c := a.rules.Load()
	switch {
	case c == nil && a.cfg.UntilRules == UntilRulesOpen:
		return "every check admitted, nothing limited, abuse rules included (until_rules open)"
	case c == nil:
		return "every check refused, 429 with Retry-After (until_rules closed)"
	case c.source == sourceStartup:
		return fmt.Sprintf("decided by the %d start-up rules, each node the whole limit, not billed (until_rules static)", c.set.Len())
	case c.source == sourceCache:
		return fmt.Sprintf("decided by the cached rules, version %d", c.set.Version())
	case c.source == sourceCluster:
		return fmt.Sprintf("decided by the cluster's rules, version %d", c.set.Version())
	}
	return "decided by the static rules"
}
