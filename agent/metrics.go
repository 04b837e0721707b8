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
}

func newMetrics(a *Agent, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reg: reg,
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_agent_reports_total", Help: "Reports to the coordinators, by result (ok, failed).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "allot_agent_report_duration_seconds", Help: "Report round trips, including failover between coordinators.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		coll: &collector{a: a},
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.reports, m.duration, m.coll} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observeReport(d time.Duration, err error) {
	m.duration.Observe(d.Seconds())
	if err != nil {
		m.reports.WithLabelValues("failed").Inc()
	} else {
		m.reports.WithLabelValues("ok").Inc()
	}
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	m.reg.Unregister(m.reports)
	m.reg.Unregister(m.duration)
	m.reg.Unregister(m.coll)
}

type collector struct{ a *Agent }

var (
	descDecisions = prometheus.NewDesc("allot_agent_decisions_total", "Requests decided, by the rule and result (admitted: passed the rule; denied: refused by it).", []string{"rule", "result"}, nil)
	descFallback  = prometheus.NewDesc("allot_agent_fallback", "1 while the rule runs on its fail mode because no coordinator answered.", []string{"rule", "fail_mode"}, nil)
	descFellBack  = prometheus.NewDesc("allot_agent_fallback_decisions_total", "Requests decided while the rule ran on its fail mode.", []string{"rule"}, nil)
	descKeys      = prometheus.NewDesc("allot_agent_keys", "Keys the rule holds state for.", []string{"rule"}, nil)
	descHot       = prometheus.NewDesc("allot_agent_hot_keys", "Keys (or classes) of the rule that hold or ask for a lease.", []string{"rule"}, nil)
	descOverflow  = prometheus.NewDesc("allot_agent_key_overflow_total", "New keys met with the rule's store full, by what happened (evicted, rejected, untracked).", []string{"rule", "action"}, nil)
	descTenants   = prometheus.NewDesc("allot_agent_tenant_overflow_total", "Requests counted under the empty tenant because MaxTenants tenants were already counted.", nil, nil)
	descOffset    = prometheus.NewDesc("allot_agent_clock_offset_seconds", "Offset added to this node's clock to agree with the coordinators'.", nil, nil)
	descNodes     = prometheus.NewDesc("allot_agent_nodes", "Nodes the coordinators hear from: the divisor of unleased and fallback shares.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDecisions, descFallback, descFellBack, descKeys, descHot, descOverflow, descTenants, descOffset, descNodes} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	ch <- prometheus.MustNewConstMetric(descOffset, prometheus.GaugeValue, time.Duration(a.clock.offset.Load()).Seconds())
	ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(a.nodes.Load()))
	comp := a.rules.Load()
	if comp == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descTenants, prometheus.CounterValue, float64(comp.usage.dropped.Load()))
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
