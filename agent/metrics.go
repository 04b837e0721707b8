package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics exposes the agent's state to Prometheus. Nothing on the request
// path touches a metric: per-rule decisions are read from the usage
// counters, and everything else from the rules' stores, when scraped.
type metrics struct {
	reg      prometheus.Registerer
	reports  *prometheus.CounterVec
	duration prometheus.Histogram
	coll     *collector
	// quarantined counts entries refused as malformed and never re-sent,
	// by kind (usage, demand) and field; quarantinedUnits their cost.
	quarantined      *prometheus.CounterVec
	quarantinedUnits *prometheus.CounterVec
}

func newMetrics(a *Agent, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reg: reg,
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_agent_reports_total", Help: "Reports to the coordinators, by result (ok, failed; shed: the leader, overloaded, answered without taking the report: the leases held kept, the usage sent again with the next report).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "allot_agent_report_duration_seconds", Help: "Report round trips, including failover between coordinators.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		coll: &collector{a: a},
		quarantined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_agent_quarantined_total", Help: "Report entries refused as malformed (by the agent's own check or a coordinator), dropped and never re-sent, by kind (usage, demand) and the field at fault.",
		}, []string{"kind", "field"}),
		quarantinedUnits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_agent_quarantined_units_total", Help: "Units of usage quarantined, never billed, by result (admitted, denied). Anything above zero is a bug or a mismatch with the coordinators' limits.",
		}, []string{"result"}),
	}
	// Every known label value starts at 0, so that increase() sees the
	// first event too.
	for _, r := range []string{"admitted", "denied"} {
		m.quarantinedUnits.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "failed", "shed"} {
		m.reports.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.reports, m.duration, m.coll, m.quarantined, m.quarantinedUnits} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observeReport(d time.Duration, result string) {
	m.duration.Observe(d.Seconds())
	m.reports.WithLabelValues(result).Inc()
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	m.reg.Unregister(m.reports)
	m.reg.Unregister(m.duration)
	m.reg.Unregister(m.coll)
	m.reg.Unregister(m.quarantined)
	m.reg.Unregister(m.quarantinedUnits)
}

type collector struct{ a *Agent }

var (
	descDecisions = prometheus.NewDesc("allot_agent_decisions_total", "Requests decided, by the rule and result (admitted: passed the rule; denied: refused by it).", []string{"rule", "result"}, nil)
	descFallback  = prometheus.NewDesc("allot_agent_fallback", "1 while the rule runs on its fail mode because no coordinator answered.", []string{"rule", "fail_mode"}, nil)
	descShadowed  = prometheus.NewDesc("allot_agent_shadow_refusals_total", "Requests a shadow rule would have refused and admitted instead.", []string{"rule"}, nil)
	descFellBack  = prometheus.NewDesc("allot_agent_fallback_decisions_total", "Requests decided while the rule ran on its fail mode.", []string{"rule"}, nil)
	descKeys      = prometheus.NewDesc("allot_agent_keys", "Keys the rule holds state for.", []string{"rule"}, nil)
	descHot       = prometheus.NewDesc("allot_agent_hot_keys", "Keys (or classes) of the rule that hold or ask for a lease.", []string{"rule"}, nil)
	descOverflow  = prometheus.NewDesc("allot_agent_key_overflow_total", "New keys met with the rule's store full, by what happened (evicted, rejected, untracked).", []string{"rule", "action"}, nil)
	descTenants   = prometheus.NewDesc("allot_agent_tenant_overflow_total", "Requests counted under the empty tenant because MaxTenants tenants were already counted.", nil, nil)
	descOffset    = prometheus.NewDesc("allot_agent_clock_offset_seconds", "Offset added to this node's clock to agree with the coordinators'.", nil, nil)
	descProblems  = prometheus.NewDesc("allot_agent_rule_problems", "1 for each rule of the set this agent does not enforce, by problem: other_region (not for this node's region) or broken (cannot be enforced; see the log and /v1/status).", []string{"rule", "problem"}, nil)
	descPeeks     = prometheus.NewDesc("allot_agent_peeks_total", "Peeks answered (checks with cost 0 at the sidecar, Request.Peek, Envoy's hits_addend 0), by result (admitted: a request would have been; denied). A peek spends, bills and counts nothing else: allot_agent_decisions_total counts requests.", []string{"result"}, nil)
	descInvalid   = prometheus.NewDesc("allot_agent_invalid_checks_total", "Checks refused without counting because their cost exceeded MaxCost.", nil, nil)
	descNodes     = prometheus.NewDesc("allot_agent_nodes", "Nodes the coordinators hear from: the divisor of unleased and fallback shares.", nil, nil)
	descReady     = prometheus.NewDesc("allot_agent_rules_ready", "1 while the agent enforces the cluster's rules (or its static --rules); 0 while it has none, or only its rules cache or start-up rules, and decides by its --until-rules policy (see /v1/status).", nil, nil)
	descExpiries  = prometheus.NewDesc("allot_agent_lease_expiries_total", "Leases of the rule that ran out unrenewed and returned their key (or class) to its unleased share: a coordinator answered without renewing them in time, or none answered for a lease period and the rule went onto its fallback fail mode. Above 0 in steady state, the coordinators are late with their answers.", []string{"rule"}, nil)
	descRefused   = prometheus.NewDesc("allot_agent_refused_limits_total", "Limits (a share or a lease) the rule's algorithm refused: the store or key kept enforcing, and reporting, the one it had; the log says which and why.", []string{"rule"}, nil)
	descCallLimit = prometheus.NewDesc("allot_agent_call_limit_fallbacks_total", "Descriptors with a limit of their own (Envoy's descriptor limit) decided by the rule's limit instead: the limit was invalid, or one the rule's algorithm cannot take, or new past the MaxCallLimits (64) the rule keeps stores for.", []string{"rule"}, nil)
	descUntil     = prometheus.NewDesc("allot_agent_until_rules_decisions_total", "Checks decided without the cluster's rules, by policy: closed (refused, no rules), open (admitted, no rules), static (the start-up rules), cache (the rules cache).", []string{"policy"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDecisions, descFallback, descFellBack, descShadowed, descKeys, descHot, descOverflow, descTenants, descOffset, descNodes, descInvalid, descPeeks, descProblems, descReady, descUntil, descRefused, descCallLimit, descExpiries} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	ch <- prometheus.MustNewConstMetric(descOffset, prometheus.GaugeValue, a.clock.offsetSeconds())
	ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(a.nodes.Load()))
	ch <- prometheus.MustNewConstMetric(descInvalid, prometheus.CounterValue, float64(a.invalid.Load()))
	ch <- prometheus.MustNewConstMetric(descPeeks, prometheus.CounterValue, float64(a.peeks[0].Load()), "admitted")
	ch <- prometheus.MustNewConstMetric(descPeeks, prometheus.CounterValue, float64(a.peeks[1].Load()), "denied")
	ready := 0.0
	if a.rulesReady() {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready)
	for i, policy := range untilDecisionLabels {
		ch <- prometheus.MustNewConstMetric(descUntil, prometheus.CounterValue, float64(a.untilDecisions[i].Load()), policy)
	}
	comp := a.rules.Load()
	if comp == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descTenants, prometheus.CounterValue, float64(comp.usage.dropped.Load()))
	for _, p := range comp.problems {
		ch <- prometheus.MustNewConstMetric(descProblems, prometheus.GaugeValue, 1, p.Rule, p.Problem)
	}
	live := comp.usage.live()
	for i, rs := range comp.rules {
		name := rs.rule.Name
		ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(comp.totals[i].admitted.Load()+live[2*i]), name, "admitted")
		ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(comp.totals[i].denied.Load()+live[2*i+1]), name, "denied")
		fb := 0.0
		if rs.fallback.Load() {
			fb = 1
		}
		ch <- prometheus.MustNewConstMetric(descFallback, prometheus.GaugeValue, fb, name, rs.mode.String())
		ch <- prometheus.MustNewConstMetric(descFellBack, prometheus.CounterValue, float64(rs.fellBack.Load()), name)
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(rs.reconfigErrs.Load()), name)
		ch <- prometheus.MustNewConstMetric(descExpiries, prometheus.CounterValue, float64(rs.expiries.Load()), name)
		if rs.calls != nil {
			ch <- prometheus.MustNewConstMetric(descCallLimit, prometheus.CounterValue, float64(rs.calls.fallbacks.Load()), name)
		}
		if rs.rule.Shadow {
			ch <- prometheus.MustNewConstMetric(descShadowed, prometheus.CounterValue, float64(rs.shadowed.Load()), name)
		}
		keys, evicted, rejected, untracked := 0, uint64(0), uint64(0), uint64(0)
		for _, st := range rs.stores() {
			if st.keyed != nil {
				s := st.keyed.Stats()
				keys += s.Keys
				evicted, rejected, untracked = evicted+s.Evicted, rejected+s.Rejected, untracked+s.Untracked
			} else {
				keys++
			}
		}
		hot := len(*rs.hot.Load())
		if rs.fair != nil {
			hot += len(*rs.fair.classes.Load())
		}
		ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(keys+hot), name)
		ch <- prometheus.MustNewConstMetric(descHot, prometheus.GaugeValue, float64(hot), name)
		ch <- prometheus.MustNewConstMetric(descOverflow, prometheus.CounterValue, float64(evicted), name, "evicted")
		ch <- prometheus.MustNewConstMetric(descOverflow, prometheus.CounterValue, float64(rejected), name, "rejected")
		ch <- prometheus.MustNewConstMetric(descOverflow, prometheus.CounterValue, float64(untracked), name, "untracked")
	}
}
