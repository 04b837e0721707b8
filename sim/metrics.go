package sim

import (
	"math"
	"slices"
	"time"

	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// Result is what one strategy did with one scenario.
type Result struct {
	Strategy string `json:"strategy"`
	// AdmittedRatio is admitted ÷ min(offered, limit), summed over every
	// tenant and window after the warm-up: 1 is exactly the limit, or all
	// that was asked when less was.
	AdmittedRatio float64 `json:"admitted_ratio"`
	// PeakOvershoot is the largest admitted ÷ limit of any tenant in any
	// window after the warm-up.
	PeakOvershoot float64 `json:"peak_overshoot"`
	// WrongfulDenials is the fraction of requests refused while their
	// tenant's admitted total (the fleet's, for a global limit) was under
	// the limit: in the current window for window algorithms; for rate
	// algorithms, more than 1% under it in the trailing period. It is what
	// a paying customer feels.
	WrongfulDenials float64 `json:"wrongful_denials"`
	// ConvergenceIntervals is how many reporting intervals after a demand
	// shift the shifted tenant first got 99% of its due; null without a
	// shift, -1 if it never did.
	ConvergenceIntervals *int `json:"convergence_intervals"`
	// StoreRoundTripsPerRequest is the network calls on the request path.
	StoreRoundTripsPerRequest float64 `json:"store_round_trips_per_request"`
	// CoordinatorMessagesPerSecond counts messages off the request path:
	// reports and answers, or hit batches and broadcasts.
	CoordinatorMessagesPerSecond float64 `json:"coordinator_messages_per_second"`
	// Fairness is Jain's index of each tenant's admitted ÷ its weighted
	// max-min fair share, for a global limit; 1 is perfectly fair.
	Fairness *float64 `json:"fairness_jain,omitempty"`
	// Leaked is what was admitted beyond the limit, summed over tenants
	// and windows after the warm-up, as a fraction of the requests.
	Leaked float64 `json:"leaked"`
	// During covers the scenario's outage, partition, failover (to the
	// end of the new leader's learning) or isolated region, when it has
	// one.
	During *Span `json:"during_event,omitempty"`
	// Settled covers, in a scenario whose tenants move between regions,
	// the run after the warm-up less the three region intervals after
	// each move: the figures once the allowance has followed.
	Settled *Span `json:"settled,omitempty"`
	// Shards are the shard groups' figures, in a scenario with shards.
	Shards *ShardsResult `json:"shards,omitempty"`

	Requests int64 `json:"requests"`
	Admitted int64 `json:"admitted"`
	Denied   int64 `json:"denied"`
	// Windows are the per-window figures, for CSV and plots.
	Windows []Window `json:"-"`
	// Shares are, per window, each node's lease (or share) of tenant 0's
	// limit, for plots.
	Shares [][]float64 `json:"-"`
}

// Span is a result over part of a run.
type Span struct {
	From            time.Duration `json:"from_ns"`
	To              time.Duration `json:"to_ns"`
	AdmittedRatio   float64       `json:"admitted_ratio"`
	PeakOvershoot   float64       `json:"peak_overshoot"`
	WrongfulDenials float64       `json:"wrongful_denials"`
	Leaked          float64       `json:"leaked"`
}

// Window is one window of the rule's period, summed over tenants.
type Window struct {
	Start    time.Duration
	Offered  int64
	Admitted int64
	Denied   int64
	Wrongful int64
	Leaked   int64 // admitted beyond the limit, summed over tenants
	Limit    int64 // the limit summed over tenants with traffic
	Due      int64 // min(offered, limit) summed over tenants
	Peak     float64
}

// meter measures one strategy's decisions.
type meter struct {
	s        *Scenario
	period   time.Duration
	limit    int64
	global   bool
	window   int64              // index of the current window
	admitted []int64            // per tenant (one slot for a global limit), current window
	offered  []int64            // same
	cur      Window             // the current window, summed
	windows  []Window           // closed windows
	slots    map[int64][2]int64 // shifted tenant: per slot, admitted and offered
	shiftAt  time.Duration
	shifted  int
	total    []int64 // per tenant, admitted after warm-up
	demand   []int64 // per tenant, offered after warm-up
	span     *spanMeter
	// trailing counts admissions over the last period, per tenant (one
	// slot for a global limit), for rate algorithms: a rate limit is "under
	// the limit" when less than the limit was admitted in the trailing
	// period, while a window limit is when less was admitted in the current
	// window.
	trailing []*Trailing
}

// ringBuckets is the trailing counters' resolution: 0.1% of a period.
const ringBuckets = 1000

// rateSlack is how far below a rate limit the trailing period's admissions
// must be for a refusal to count as wrongful.
const rateSlack = 0.99

// spanMeter counts, per request, the wrongful denials during an event.
type spanMeter struct {
	from, to    time.Duration
	wrong, reqs int64
}

func newMeter(s *Scenario, r *rules.Rule) *meter {
	m := &meter{s: s, period: r.Period, limit: r.Limit, global: r.Scope == rules.Global, window: -1, shifted: -1}
	n := s.Tenants.Count
	if m.global {
		m.admitted, m.offered = make([]int64, 1), make([]int64, 1)
	} else {
		m.admitted, m.offered = make([]int64, n), make([]int64, n)
	}
	m.total, m.demand = make([]int64, n), make([]int64, n)
	if !r.Algorithm.Windowed() {
		m.trailing = make([]*Trailing, len(m.admitted))
		n := ringBuckets
		if len(m.trailing) > 1000 {
			n = 100 // bounded memory for many tenants: 1% resolution
		}
		for i := range m.trailing {
			m.trailing[i] = NewTrailing(m.period, n)
		}
	}
	for _, e := range s.Events {
		if e.Shift != nil && m.shifted < 0 {
			m.shifted, m.shiftAt = e.Shift.Tenant, e.At
			m.slots = map[int64][2]int64{}
		}
		// A move after the start is a shift to another region.
		if e.Move != nil && e.At > 0 && m.shifted < 0 {
			m.shifted, m.shiftAt = e.Move.Tenant, e.At
			m.slots = map[int64][2]int64{}
		}
		if e.Isolate != nil {
			m.span = &spanMeter{from: e.At, to: e.At + e.Isolate.For}
		}
		if e.Outage > 0 {
			m.span = &spanMeter{from: e.At, to: e.At + e.Outage}
		}
		if e.Partition != nil {
			m.span = &spanMeter{from: e.At, to: e.At + e.Partition.For}
		}
		if e.MoveSlots != nil && s.Shards != nil {
			w := s.moveWindow(e.At)
			m.span = &spanMeter{from: w[0], to: w[1]}
		}
		if e.Failover {
			// The new leader learns for a lease period and needs one more
			// interval to hand out what it learned.
			m.span = &spanMeter{from: e.At, to: e.At + time.Duration(allocator.DefaultLeaseIntervals+1)*s.Interval}
		}
	}
	return m
}

// record counts one decision.
func (m *meter) record(at time.Duration, tenant int, allowed bool) {
	w := int64(at / m.period)
	if w != m.window {
		m.close()
		m.window = w
	}
	slot := tenant
	if m.global {
		slot = 0
	}
	m.offered[slot]++
	m.cur.Offered++
	after := at >= m.s.Warmup
	if after {
		m.demand[tenant]++
	}
	wrongful := false
	if allowed {
		m.admitted[slot]++
		m.cur.Admitted++
		if after {
			m.total[tenant]++
		}
		if m.trailing != nil {
			m.trailing[slot].Add(at)
		}
	} else {
		m.cur.Denied++
		under := m.admitted[slot] < m.limit
		if m.trailing != nil {
			// A rate limit refills continuously, so even an exact one sits
			// a request or two below its limit in any trailing period:
			// only a shortfall of more than 1% counts.
			under = float64(m.trailing[slot].Count(at)) < rateSlack*float64(m.limit)
		}
		if under {
			wrongful = true
			m.cur.Wrongful++
		}
	}
	if tenant == m.shifted {
		k := int64(at / m.s.Interval)
		v := m.slots[k]
		v[1]++
		if allowed {
			v[0]++
		}
		m.slots[k] = v
	}
	if sp := m.span; sp != nil && at >= sp.from && at < sp.to {
		sp.reqs++
		if wrongful {
			sp.wrong++
		}
	}
}

// close ends the current window.
func (m *meter) close() {
	if m.window < 0 {
		return
	}
	start := time.Duration(m.window) * m.period
	peak := 0.0
	for i := range m.admitted {
		if m.offered[i] == 0 {
			continue
		}
		m.cur.Limit += m.limit
		m.cur.Due += min(m.offered[i], m.limit)
		m.cur.Leaked += max(m.admitted[i]-m.limit, 0)
		peak = math.Max(peak, float64(m.admitted[i])/float64(m.limit))
	}
	m.cur.Start, m.cur.Peak = start, peak
	m.windows = append(m.windows, m.cur)
	m.cur = Window{}
	clear(m.admitted)
	clear(m.offered)
}

// sums are a run's window figures added up over part of it.
type sums struct {
	due, admitted, wrong, leaked, reqs int64
	peak                               float64
}

// sum adds up the windows that lie wholly within [from, to), less any
// that overlap a span in skip.
func (m *meter) sum(from, to time.Duration, skip ...[2]time.Duration) (t sums) {
	for _, w := range m.windows {
		if w.Start < from || w.Start+m.period > to {
			continue
		}
		if slices.ContainsFunc(skip, func(s [2]time.Duration) bool { return w.Start < s[1] && w.Start+m.period > s[0] }) {
			continue
		}
		t.due += w.Due
		t.admitted += w.Admitted
		t.wrong += w.Wrongful
		t.leaked += w.Leaked
		t.reqs += w.Offered
		t.peak = math.Max(t.peak, w.Peak)
	}
	return t
}

// ratio is a ÷ b, or 0 when b is.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// result sums the run after the warm-up.
func (m *meter) result(name string, duration time.Duration) *Result {
	m.close()
	r := &Result{Strategy: name, Windows: m.windows}
	for _, w := range m.windows {
		r.Requests += w.Offered
		r.Admitted += w.Admitted
		r.Denied += w.Denied
	}
	run := m.sum(m.s.Warmup, duration)
	r.AdmittedRatio, r.PeakOvershoot = ratio(run.admitted, run.due), run.peak
	r.WrongfulDenials, r.Leaked = ratio(run.wrong, run.reqs), ratio(run.leaked, run.reqs)
	if m.shifted >= 0 {
		r.ConvergenceIntervals = m.convergence()
	}
	if g := m.s.Regions; g != nil {
		var moves [][2]time.Duration
		for _, e := range m.s.Events {
			if e.Move != nil && e.At > 0 {
				moves = append(moves, [2]time.Duration{e.At, e.At + 3*g.regionInterval()})
			}
		}
		if len(moves) > 0 {
			st := m.sum(m.s.Warmup, duration, moves...)
			r.Settled = &Span{From: m.s.Warmup, To: duration, AdmittedRatio: ratio(st.admitted, st.due), PeakOvershoot: st.peak,
				WrongfulDenials: ratio(st.wrong, st.reqs), Leaked: ratio(st.leaked, st.reqs)}
		}
	}
	if sp := m.span; sp != nil {
		// Wrongful denials are counted per request in the span itself;
		// the rest, from the windows wholly inside it.
		ev := m.sum(sp.from, sp.to)
		r.During = &Span{From: sp.from, To: sp.to, AdmittedRatio: ratio(ev.admitted, ev.due), PeakOvershoot: ev.peak,
			WrongfulDenials: ratio(sp.wrong, sp.reqs), Leaked: ratio(ev.leaked, sp.reqs)}
	}
	if m.global {
		f := m.fairness()
		r.Fairness = &f
	}
	return r
}

// convergence counts reporting intervals from the shift until the shifted
// tenant first gets 99% of what it is due in an interval.
func (m *meter) convergence() *int {
	first := int64(m.shiftAt / m.s.Interval)
	perSlot := float64(m.limit) * float64(m.s.Interval) / float64(m.period)
	for k := first; k < first+1000; k++ {
		v, ok := m.slots[k]
		if !ok {
			break
		}
		due := math.Min(float64(v[1]), perSlot)
		if due > 0 && float64(v[0]) >= 0.99*due {
			n := int(k - first + 1)
			return &n
		}
	}
	never := -1
	return &never
}

// fairness is Jain's index of admitted ÷ weighted max-min fair share, the
// fair shares computed by package lease from what each tenant offered.
func (m *meter) fairness() float64 {
	classes := make([]lease.Class, len(m.total))
	var active []int
	for i := range classes {
		classes[i] = lease.Class{Weight: m.s.weight(i), Priority: 1, Claims: []lease.Claim{{Present: true, Demand: float64(m.demand[i])}}}
		if m.demand[i] > 0 {
			active = append(active, i)
		}
	}
	run := m.s.Duration - m.s.Warmup
	var a lease.Allocator
	a.AllocateFair(lease.Pool{Limit: float64(m.limit) * float64(run) / float64(m.period)}, classes)
	sum, sumSq := 0.0, 0.0
	for _, i := range active {
		fair := math.Min(classes[i].Share, float64(m.demand[i]))
		if fair <= 0 {
			continue
		}
		x := float64(m.total[i]) / fair
		sum += x
		sumSq += x * x
	}
	if sumSq == 0 {
		return 1
	}
	return sum * sum / (float64(len(active)) * sumSq)
}
