package main

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// shape is what the traffic model is built from: the flags.
type shape struct {
	gateways, tenants int
	rate              float64 // checks/s per gateway
	zipf              float64 // exponent of tenants', users' and routes' popularity
	minUsers          int
	maxUsers          int
	routes            int
	connRate          float64 // checks/s one client connection carries
	batch             float64 // fraction of checks at batch priority
	headroom          float64 // limits over what the heaviest non-binding key offers
}

// The rules' names, in the order the agent evaluates them (by scope).
const (
	ruleGlobal = iota
	ruleTenant
	ruleUser
	ruleRoute
	nRules
)

var ruleNames = [nRules]string{"capacity", "tenant-quota", "per-user", "route-quota"}

// plans are the tenant classes, heaviest tenants first: the first 1% of
// tenants by traffic are enterprise, the next 9% pro, the rest free.
var plans = [...]struct {
	name   string
	upTo   float64 // of the tenants, ranked by traffic
	weight float64 // under the global rule
	rank   uint8
}{{"enterprise", 0.01, 10, 2}, {"pro", 0.10, 4, 1}, {"free", 1, 1, 0}}

// tenant is one tenant of the model.
type tenant struct {
	name, plan string
	planIdx    int
	rate       float64 // checks/s it offers across the fleet
	users      int
	userBase   int  // its first user key (index into the user rule's keys)
	gateways   int  // gateways its connections landed on
	binds      bool // its quota is set below what it offers
}

// mix is one gateway's traffic: which tenants it serves and how much of
// its checks each takes (cumulative, ending at 1).
type mix struct {
	tenants []int32
	cum     []float64
}

// model is the fleet's traffic and the rules that limit it, worked out
// from the shape before anything starts, so that every limit is known in
// checks and every refusal can be judged against what its key offered.
type model struct {
	shape
	tenants  []tenant
	mixes    []mix // per gateway
	userCum  []float64
	routeCum []float64
	users    int // user keys, over every tenant
	// limits per plan (index as plans): quota and route quota per
	// minute, user rate per second (its burst is a second's worth).
	quota, userRate, routeQuota [len(plans)]int64
	tenantQuota                 map[int]int64 // binding tenants' quotas
	global, globalBurst         int64
	rules                       []rules.Rule
}

// zipfCum is the cumulative popularity of n ranks: rank k weighs k^-s.
func zipfCum(n int, s float64) []float64 {
	cum := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += math.Pow(float64(k+1), -s)
		cum[k] = sum
	}
	return cum
}

// newModel works the traffic out:
//
//   - tenant k (from 1) weighs k^-zipf, and offers that share of the
//     fleet's checks (gateways × rate);
//   - it has users from maxUsers (the heaviest) down to minUsers, as
//     maxUsers·k^-0.3, each user's share of its checks Zipf again, and
//     its checks spread over the routes by Zipf;
//   - a least-connections balancer in front of the gateways: each tenant
//     opens one connection per connRate checks/s it offers (at least
//     one), heaviest tenant first, and each connection lands on the
//     gateway with the least traffic so far (least outstanding requests,
//     the load-aware form of least connections). A tenant is thus on one
//     gateway or on many, as its traffic says, and every gateway then
//     offers exactly rate checks/s of the mix of tenants it got;
//   - the heaviest tenant of each plan binds: its quota is half of what
//     it offers. Every other limit is headroom times what the heaviest
//     key it covers offers, so that nothing else binds at the base load.
func newModel(sh shape) (*model, error) {
	switch {
	case sh.gateways < 1 || sh.tenants < 1:
		return nil, fmt.Errorf("want at least one gateway and one tenant, got %d and %d", sh.gateways, sh.tenants)
	case sh.rate <= 0 || sh.connRate <= 0:
		return nil, fmt.Errorf("want a positive rate and connection rate, got %v and %v", sh.rate, sh.connRate)
	case sh.minUsers < 1 || sh.maxUsers < sh.minUsers || sh.routes < 1:
		return nil, fmt.Errorf("want 1 ≤ min users ≤ max users and a route, got %d, %d and %d", sh.minUsers, sh.maxUsers, sh.routes)
	case sh.zipf <= 0 || sh.headroom <= 1 || sh.batch < 0 || sh.batch > 1:
		return nil, fmt.Errorf("want zipf > 0, headroom > 1 and batch in [0, 1], got %v, %v and %v", sh.zipf, sh.headroom, sh.batch)
	}
	m := &model{shape: sh, userCum: zipfCum(sh.maxUsers, sh.zipf), routeCum: zipfCum(sh.routes, sh.zipf), tenantQuota: map[int]int64{}}
	tcum := zipfCum(sh.tenants, sh.zipf)
	total := float64(sh.gateways) * sh.rate
	m.tenants = make([]tenant, sh.tenants)
	for i := range m.tenants {
		t := &m.tenants[i]
		t.name = fmt.Sprintf("t%05d", i+1)
		for p := range plans {
			if float64(i) < math.Max(1, math.Round(plans[p].upTo*float64(sh.tenants))) || p == len(plans)-1 {
				t.plan, t.planIdx = plans[p].name, p
				break
			}
		}
		t.users = min(sh.maxUsers, max(sh.minUsers, int(math.Round(float64(sh.maxUsers)*math.Pow(float64(i+1), -0.3)))))
		t.userBase = m.users
		m.users += t.users
		t.rate = total * math.Pow(float64(i+1), -sh.zipf) / tcum[len(tcum)-1]
	}
	m.balance()
	m.setLimits()
	if err := m.writeRules(); err != nil {
		return nil, err
	}
	return m, nil
}

// balance places the tenants' connections on the gateways and sets each
// gateway's mix, and each tenant's rate to what the gateways' mixes make
// of it.
func (m *model) balance() {
	gws := make(gwHeap, m.gateways)
	for g := range gws {
		gws[g] = &gwLoad{index: g, by: map[int32]float64{}}
	}
	heap.Init(&gws)
	for i := range m.tenants {
		t := &m.tenants[i]
		conns := max(1, int(math.Ceil(t.rate/m.connRate)))
		per := t.rate / float64(conns)
		for range conns {
			g := gws[0]
			g.load += per
			g.conns++
			g.by[int32(i)] += per
			heap.Fix(&gws, 0)
		}
	}
	m.mixes = make([]mix, m.gateways)
	rates := make([]float64, len(m.tenants))
	for _, g := range gws {
		mx := &m.mixes[g.index]
		for ti := range g.by {
			mx.tenants = append(mx.tenants, ti)
		}
		slices.Sort(mx.tenants)
		sum := 0.0
		for _, ti := range mx.tenants {
			share := g.by[ti] / g.load
			sum += share
			mx.cum = append(mx.cum, sum)
			rates[ti] += m.rate * share
			m.tenants[ti].gateways++
		}
		mx.cum[len(mx.cum)-1] = 1
	}
	for i := range m.tenants {
		m.tenants[i].rate = rates[i]
	}
}

// gwLoad is a gateway as the balancer sees it.
type gwLoad struct {
	index int
	load  float64
	conns int
	by    map[int32]float64 // tenant → checks/s
}

type gwHeap []*gwLoad

func (h gwHeap) Len() int { return len(h) }
func (h gwHeap) Less(i, j int) bool {
	if h[i].load != h[j].load {
		return h[i].load < h[j].load
	}
	if h[i].conns != h[j].conns {
		return h[i].conns < h[j].conns
	}
	return h[i].index < h[j].index
}
func (h gwHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *gwHeap) Push(x any)   { *h = append(*h, x.(*gwLoad)) }
func (h *gwHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// topShare is the share of its checks a tenant's busiest user (or route)
// takes, of n by Zipf.
func topShare(cum []float64, n int) float64 { return cum[0] / cum[n-1] }

// setLimits works out every limit from the tenants' rates.
func (m *model) setLimits() {
	var quotaMax, userMax, routeMax [len(plans)]float64
	seen := [len(plans)]bool{}
	for i := range m.tenants {
		t := &m.tenants[i]
		p := t.planIdx
		// A user's checks are limited per second: the binding tenant's
		// pass at their full rate until its quota is spent.
		userMax[p] = math.Max(userMax[p], t.rate*topShare(m.userCum, t.users))
		reached := t.rate // what reaches the route quota, per minute
		if !seen[p] {
			// The heaviest tenant of the plan binds at half its traffic.
			seen[p], t.binds = true, true
			m.tenantQuota[i] = max(1, int64(0.5*60*t.rate))
			reached = 0.5 * t.rate
		} else {
			quotaMax[p] = math.Max(quotaMax[p], t.rate)
		}
		routeMax[p] = math.Max(routeMax[p], reached*topShare(m.routeCum, m.routes))
	}
	for p := range plans {
		if quotaMax[p] == 0 { // the plan has only its binding tenant
			quotaMax[p] = 1
		}
		m.quota[p] = max(1, int64(math.Ceil(m.headroom*60*quotaMax[p])))
		m.userRate[p] = max(1, int64(math.Ceil(m.headroom*userMax[p])))
		m.routeQuota[p] = max(1, int64(math.Ceil(m.headroom*60*routeMax[p])))
	}
	total := float64(m.gateways) * m.rate
	m.global = int64(math.Ceil(m.headroom * total))
	// A fifth of the limit: a global capacity rule lends only with a
	// burst (docs/rules.md, "Give global capacity rules a burst").
	m.globalBurst = max(1, m.global/5)
}

// writeRules makes the four rules: a global capacity rule whose classes
// are the tenants (by plan: weight and shedding rank), a tenant quota
// per minute (fixed window), a per-user GCRA and a route quota per minute
// (fixed window, keyed by tenant and route). The free plan's limits are
// the rules' own; the others are plans.
func (m *model) writeRules() error {
	free := len(plans) - 1
	planLimits := func(of *[len(plans)]int64) map[string]rules.Plan {
		out := map[string]rules.Plan{}
		for p := range free {
			out[plans[p].name] = rules.Plan{Limit: of[p]}
		}
		return out
	}
	classes := map[string]rules.Plan{}
	for _, p := range plans {
		classes[p.name] = rules.Plan{Weight: p.weight, Rank: p.rank}
	}
	tenants := map[string]rules.TenantOverride{}
	for i, q := range m.tenantQuota {
		tenants[m.tenants[i].name] = rules.TenantOverride{Limit: q}
	}
	m.rules = []rules.Rule{
		{Name: ruleNames[ruleGlobal], Description: "Capacity of the API tier, shared by tenant class.", Scope: rules.Global,
			Algorithm: algo.TokenBucket, Limit: m.global, Period: time.Second, Burst: m.globalBurst, Intent: lease.Capacity, Plans: classes},
		{Name: ruleNames[ruleTenant], Description: "Requests per minute in each plan; the heaviest tenant of each plan is held to half its traffic.", Scope: rules.Tenant,
			Algorithm: algo.FixedWindow, Limit: m.quota[free], Period: time.Minute, Intent: lease.Quota, Plans: planLimits(&m.quota), Tenants: tenants},
		{Name: ruleNames[ruleUser], Description: "One user's script must not eat the tenant's quota.", Scope: rules.User,
			Algorithm: algo.GCRA, Limit: m.userRate[free], Period: time.Second, Burst: m.userRate[free], Intent: lease.Capacity, Plans: planLimits(&m.userRate)},
		{Name: ruleNames[ruleRoute], Description: "Requests per minute per tenant and route.", Scope: rules.Route,
			Algorithm: algo.FixedWindow, Limit: m.routeQuota[free], Period: time.Minute, Intent: lease.Quota, Plans: planLimits(&m.routeQuota)},
	}
	var problems []string
	for i := range m.rules {
		for _, e := range m.rules[i].Validate() {
			problems = append(problems, e.Error())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the model's rules are invalid: %s", strings.Join(problems, "; "))
	}
	return nil
}

// limitOf is a key's limit under a rule, per the rule's period, and the
// burst on top for rate rules.
func (m *model) limitOf(rule, ti int) (limit, burst float64) {
	t := &m.tenants[ti]
	switch rule {
	case ruleGlobal:
		return float64(m.global), float64(m.globalBurst)
	case ruleTenant:
		if q, ok := m.tenantQuota[ti]; ok {
			return float64(q), 0
		}
		return float64(m.quota[t.planIdx]), 0
	case ruleUser:
		return float64(m.userRate[t.planIdx]), float64(m.userRate[t.planIdx])
	default:
		return float64(m.routeQuota[t.planIdx]), 0
	}
}

// describe is the model in a few lines, for the run's head.
func (m *model) describe() []string {
	total := float64(m.gateways) * m.rate
	top := &m.tenants[0]
	keys := 0
	for _, mx := range m.mixes {
		keys += len(mx.tenants)
	}
	lines := []string{
		fmt.Sprintf("traffic: %d gateways × %.0f checks/s = %.0f checks/s; %d tenants, Zipf %.2f: the heaviest %.1f%% on %d gateways, the lightest %.3f checks/s; %.1f tenants per gateway; %d users, %d routes; %.0f%% batch",
			m.gateways, m.rate, total, len(m.tenants), m.zipf, 100*top.rate/total, top.gateways, m.tenants[len(m.tenants)-1].rate,
			float64(keys)/float64(m.gateways), m.users, m.routes, 100*m.batch),
		fmt.Sprintf("rules: %s %d/s burst %d; %s per minute %s; %s per second %s; %s per minute %s",
			ruleNames[ruleGlobal], m.global, m.globalBurst, ruleNames[ruleTenant], planList(&m.quota), ruleNames[ruleUser], planList(&m.userRate),
			ruleNames[ruleRoute], planList(&m.routeQuota)),
	}
	var binds []string
	refused := 0.0
	for i, q := range m.tenantQuota {
		t := &m.tenants[i]
		binds = append(binds, fmt.Sprintf("%s (%s, %.0f/s, quota %d/min)", t.name, t.plan, t.rate, q))
		refused += math.Max(0, t.rate-float64(q)/60)
	}
	slices.Sort(binds)
	lines = append(lines, fmt.Sprintf("binding: %s: about %.1f%% of checks refused by %s; nothing else binds at this load (limits %.1f× the heaviest key's traffic)",
		strings.Join(binds, ", "), 100*refused/total, ruleNames[ruleTenant], m.headroom))
	return lines
}

func planList(of *[len(plans)]int64) string {
	parts := make([]string, len(plans))
	for p := range plans {
		parts[p] = fmt.Sprintf("%s %d", plans[p].name, of[p])
	}
	return strings.Join(parts, ", ")
}
