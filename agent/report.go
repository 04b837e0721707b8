package agent

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/internal/clusterclient"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
)

// reporter runs the agent's exchange with the coordinators on one
// goroutine: once per interval it cuts the usage counters, turns keys that
// asked for leases into hot keys, reports usage and demand, and applies
// the answer: leases, rules, the cluster's settings and the clock offset.
// When no coordinator answers for a lease period, each rule goes onto its
// fail mode, loudly, and comes back when one answers again.
type reporter struct {
	a           *Agent
	transport   Transport
	client      *clusterclient.Client // the default transport, when Coordinators are dialled
	incarnation uint64

	seq uint64
	// pending are the sealed usage batches, in sequence; the first is
	// sent until acknowledged, the others have never been sent.
	pending  []*allotpb.UsageBatch
	acc      map[usageKey]*usageCounts // counted, not yet in a batch
	retired  []retiredSet              // replaced rule sets, still drained
	lim      limits                    // bounds on one report
	lastErr  error                     // the last report's failure
	window   time.Duration             // billing window
	lastCut  int64                     // ns
	lastRun  int64                     // ns, last regular report
	lastOK   int64                     // ns, last answered report
	lastWarn int64                     // ns, last warning of failing reports
	ttl      time.Duration             // lease period
	cutOff   bool                      // no coordinator for a lease period
	version  uint64                    // rules version enforced
	// overrides are the per-tenant overrides the coordinators sent.
	overrides overrideBook
	// resets is where the agent is in the coordinators' key resets.
	resets resetBook
	quit   chan struct{}
	// answeredCount counts answered reports, for tests and status;
	// lastAnswer is when the last one was (ns, coordinators' clock), and
	// pendingCount mirrors len(pending), for Status.
	answeredCount atomic.Int64
	lastAnswer    atomic.Int64
	pendingCount  atomic.Int64
	exited        chan struct{}
	// regularAnswers counts answered regular reports while the process
	// joins the fleet (see joinReports).
	regularAnswers int
	// reportWatch keeps refused reports and the rules cache (refusal.go).
	reportWatch
}

func newReporter(a *Agent) (*reporter, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("agent: drawing an incarnation: %w", err)
	}
	inc := binary.LittleEndian.Uint64(b[:]) | 1
	now := a.clock.now()
	r := &reporter{
		a: a, transport: a.cfg.Transport, incarnation: inc,
		acc: map[usageKey]*usageCounts{}, window: time.Hour, lim: limits{defaultMaxEntries, defaultMaxBytes},
		lastCut: now, lastRun: now, lastOK: now, ttl: 5 * a.cfg.ReportInterval,
		quit: make(chan struct{}), exited: make(chan struct{}),
	}
	if r.transport == nil {
		var err error
		if r.client, err = newClient(&a.cfg); err != nil {
			return nil, err
		}
		r.transport = newRouter(r.client, a.log, a.globalRule)
	}
	return r, nil
}

func (r *reporter) run() {
	defer close(r.exited)
	a := r.a
	r.cycle(false)
	interval := a.interval()
	ticker := a.ts.NewTicker(interval)
	defer ticker.Stop()
	boundary := a.ts.NewTimer(r.untilBoundary())
	defer boundary.Stop()
	// earlyRetry asks again for an early report asked for too soon after
	// the last: it is delayed, never dropped.
	earlyRetry := a.ts.NewTimer(time.Hour)
	earlyRetry.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-a.stop:
			return
		case <-ticker.C():
			r.cycle(false)
			if iv := a.interval(); iv != interval {
				interval = iv
				ticker.Reset(interval)
			}
		case <-boundary.C():
			// A billing window just ended: what was counted belongs to it.
			r.cut(time.Unix(0, a.clock.now()-1))
			boundary.Reset(r.untilBoundary())
		case <-a.early:
			// A leased key runs low, or a lowered lease is to be
			// confirmed: report early, at most ten times an interval.
			if wait := a.earlyWait(); wait == 0 {
				r.cycle(true)
			} else {
				earlyRetry.Reset(wait)
			}
		case <-earlyRetry.C():
			a.askEarly()
		}
	}
}

func (r *reporter) untilBoundary() time.Duration {
	w := int64(r.window)
	now := r.a.clock.now()
	return time.Duration(w - now%w + int64(time.Millisecond))
}

// retiredSet is a replaced rule set whose usage counters are drained at
// the next retireCuts cuts: a check that loaded the set just before the
// swap counts into it for nanoseconds.
type retiredSet struct {
	c    *compiled
	left int
}

const retireCuts = 3

// cut moves the usage counters into the accumulator, under the billing
// window that holds at.
func (r *reporter) cut(at time.Time) { r.cutPicking(at, nil) }

// cutPicking cuts, returning the current rules' counts that pick picks.
func (r *reporter) cutPicking(at time.Time, pick func(rule int, adm, den int64) bool) []tenantCount {
	c := r.a.rules.Load()
	window := at.Truncate(r.window).Unix()
	live := r.retired[:0]
	for _, old := range r.retired {
		old.c.usage.cut(old.c.names, window, billed(old.c, r.acc), old.c.totals, nil)
		if old.left--; old.left > 0 {
			live = append(live, old)
		}
	}
	r.retired = live
	var picked []tenantCount
	if c != nil {
		picked = c.usage.cut(c.names, window, billed(c, r.acc), c.totals, pick)
	}
	r.lastCut = at.UnixNano()
	return picked
}

// busyFraction is the part of its unleased share a tenant must use in an
// interval, on a node, for its key under a tenant-keyed rule to ask for a
// lease there. A token bucket refilling faster than a tenant spends never
// runs half empty, so the bucket alone would let a node spend most of its
// even share unseen by the coordinator, which meanwhile divides the whole
// limit among the nodes that do hold leases: a tenant on three of four
// nodes, 70/20/10, was admitted 115% of its quota that way. Counted usage
// shows such a node; what stays unseen is under an eighth of an even share
// per node.
const busyFraction = 0.125

// busyTenants returns, for the tenant-keyed rules of c, a filter that
// picks the tenants that used at least busyFraction of their node's
// unleased share since the last cut, and a function that makes their keys
// hot, seeded with the counts, so that their first report carries their
// demand.
func (r *reporter) busyTenants(c *compiled, now time.Time) (pick func(rule int, adm, den int64) bool, promote func([]tenantCount)) {
	if c == nil {
		return nil, nil
	}
	interval := float64(now.UnixNano() - r.lastRun)
	if interval <= 0 {
		return nil, nil
	}
	// The smallest share of each tenant-keyed rule (its plans' limits
	// differ) filters cheaply inside the cut; promote tests exactly.
	least := make([]float64, len(c.rules))
	for i, rs := range c.rules {
		least[i] = math.Inf(1)
		if !rs.tenantKeyed() {
			continue
		}
		for _, st := range rs.stores() {
			st.mu.Lock()
			least[i] = math.Min(least[i], st.share)
			st.mu.Unlock()
		}
	}
	pick = func(i int, adm, den int64) bool {
		return float64(adm+den) >= busyFraction*least[i]*interval/float64(c.rules[i].rule.Period)
	}
	promote = func(counts []tenantCount) {
		for _, tc := range counts {
			rs := c.rules[tc.rule]
			req := Request{Tenant: tc.tenant.name, Plan: tc.tenant.plan}
			st := rs.store(&req)
			st.mu.Lock()
			share := st.share
			st.mu.Unlock()
			if float64(tc.admitted+tc.denied) < busyFraction*share*interval/float64(rs.rule.Period) {
				continue
			}
			h := tc.tenant.hash
			if _, hot := (*rs.hot.Load())[h]; hot || rs.pending.seen(h) {
				continue
			}
			var buf keyBuf
			rs.pending.addSeeded(h, encodeKey(&buf, rs.attrs, &req), &req, tc.admitted, tc.denied, r.lastRun-r.offset())
		}
	}
	return pick, promote
}

// cycle is one exchange. An early (urgent) one reports only the keys
// running low, and no usage.
func (r *reporter) cycle(urgent bool) {
	if !urgent {
		r.a.settleDue(false)
	}
	x := r.prepare(urgent)
	if x == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.a.interval())
	defer cancel()
	for part := x; part != nil; part = part.next {
		if !r.send(ctx, part) {
			return // unanswered: the rest waits for the next cycle
		}
	}
	if !urgent {
		ctx, cancel := context.WithTimeout(context.Background(), r.a.interval())
		defer cancel()
		r.catchUp(ctx)
	}
}

// exchange is one report, or one part of a report split to fit the
// coordinators' limits: the request, and what the answer to it is applied
// to.
type exchange struct {
	req    *allotpb.ReportRequest
	held   []*hotKey
	sent   int64 // local clock
	urgent bool
	next   *exchange // the report's next part, or nil
}

// prepare cuts the usage counters, turns keys that asked for leases into
// hot keys, and builds the report.
func (r *reporter) prepare(urgent bool) *exchange {
	a := r.a
	now := a.clock.now()
	nowT := time.Unix(0, now)
	c := a.rules.Load()
	if !urgent {
		pick, promote := r.busyTenants(c, nowT)
		if busy := r.cutPicking(nowT, pick); promote != nil {
			promote(busy)
		}
		r.seal(now)
	}
	if c != nil {
		// Keys that asked for a lease become hot now, and start counting.
		for _, rs := range c.rules {
			if rs.coordinated {
				lt := rs.limiterTime(now)
				rs.promote(a, lt)
				if rs.fair != nil {
					rs.fair.promoteClasses(a, rs)
				}
				if !urgent {
					rs.demote(a, lt)
				}
			}
		}
	}
	req, held := r.request(c, now, urgent, false)
	if !urgent {
		r.lastRun = now
	} else if len(req.GetDemand()) == 0 {
		return nil // nothing runs low: there is nothing to ask
	}
	x := &exchange{req: req, held: held, sent: a.clock.local(), urgent: urgent}
	r.splitDemand(x)
	return x
}

// offset converts the agent's local clock to the coordinators'.
func (r *reporter) offset() int64 { return r.a.clock.offset.Load() }

// deliver applies an answer to a prepared report, or its failure.
func (r *reporter) deliver(x *exchange, resp *allotpb.ReportResponse, err error) {
	a := r.a
	received := a.clock.local()
	result := "ok"
	switch {
	case err != nil:
		result = "failed"
	case resp.GetShed():
		result = "shed"
	}
	a.metrics.observeReport(time.Duration(received-x.sent), result)
	r.lastErr = err
	if err != nil || time.Duration(received-x.sent) > a.interval()/2 {
		// Answers come late, or not at all: early reports wait an
		// interval, so that a leader falling behind is not asked more.
		a.holdEarly(received + int64(a.interval()))
	}
	if err != nil {
		r.failed(a.clock.now(), err)
		return
	}
	if resp.GetShed() {
		r.shedAnswered(resp, x.held, received)
		return
	}
	r.answered(resp, x.held, x.sent, received)
	if !x.urgent && a.joining.Load() {
		if r.regularAnswers++; r.regularAnswers >= joinReports {
			a.joining.Store(false)
		}
	}
}

// shedAnswered takes the answer of a leader that shed the report: too
// many were under way. Nothing of the report was applied, so its usage
// batch stays pending for the next report; no lease changed, and the
// leases it said it held are renewed as any answer renews them (when the
// leader renews them at all: it does for a node it has heard from in its
// term, and counts them held until then). The agent keeps enforcing them
// and asks for nothing early before the answer's retry_after.
func (r *reporter) shedAnswered(resp *allotpb.ReportResponse, held []*hotKey, received int64) {
	a := r.a
	a.holdEarly(received + max(resp.GetRetryAfterNano(), int64(a.interval())))
	now := a.clock.now()
	if renew := resp.GetRenewUnixNano(); renew > 0 {
		r.lastOK = now
		for _, hk := range held {
			if hk.leased.Load() && hk.epoch == resp.GetEpoch() {
				hk.expires = max(hk.expires, renew)
			}
		}
	}
	if now-r.lastWarn >= int64(10*time.Second) {
		r.lastWarn = now
		a.log.Warn("the coordinators' leader is overloaded and shed this report: the leases held are kept, the usage goes again with the next report",
			"renewed", resp.GetRenewUnixNano() > 0, "retry_after", time.Duration(resp.GetRetryAfterNano()))
	}
}

// joinReports is how many regular reports a new process has answered
// before it stops joining. While it joins, a key of a coordinated rule
// asks for a lease at its first check, and the report that makes it hot
// carries it at once: a process that replaces another under the same node
// name (a deploy, a crash) cannot know what its predecessor spent in the
// current window, and every unit it admits on an unleased share is on top
// of it; the coordinators know, and the lease they answer with within a
// round trip accounts for it. The first answer brings the rules, the
// second the fleet's leases; one more covers a report lost on the way.
const joinReports = 3

// request builds a report: the pending usage batch and the demand of every
// hot key and class (an urgent one: only those running low).
func (r *reporter) request(c *compiled, now int64, urgent, leaving bool) (*allotpb.ReportRequest, []*hotKey) {
	a := r.a
	req := &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: a.cfg.NodeID, Incarnation: r.incarnation,
		Region: a.cfg.Region, SentUnixNano: now, IntervalNano: max(now-r.lastRun, 1),
		RulesVersion: r.version, Urgent: urgent, Leaving: leaving,
		OverridesVersion: r.overrides.version,
		ResetsVersion:    r.resets.version, ResetsFollowing: r.resets.following,
	}
	if !urgent && len(r.pending) > 0 {
		req.Usage = r.pending[0]
	}
	if c == nil {
		return req, nil
	}
	var held []*hotKey
	nowT := time.Unix(0, now)
	add := func(rs *ruleState, hk *hotKey) {
		if (urgent && !hk.urgent.Load() && !hk.confirm) || hk.refused {
			return
		}
		hk.confirm = false
		d := &allotpb.KeyDemand{Rule: rs.rule.Name, Key: hk.key, Tenant: hk.wireTenant, Plan: hk.wirePlan, Priority: hk.priority}
		kr := hk.store.ruleOf(rs)
		if hk.store.suffix != "" {
			d.Limit, d.PeriodNano, d.Burst = kr.Limit, int64(kr.Period), hk.store.callBurst // a call limit's key
		}
		if urgent {
			d.Admitted, d.Denied = float64(max(hk.admitted.Load(), 0)), float64(max(hk.denied.Load(), 0))
		} else {
			d.Admitted, d.Denied = takeCount(&hk.admitted), takeCount(&hk.denied)
			hk.urgent.Store(false) // may ask early once more before the next
		}
		if rs.fair != nil {
			d.Weight = rs.rule.WeightFor(hk.tenant, hk.plan)
		}
		if since := hk.since + r.offset(); since > r.lastRun {
			d.IntervalNano = max(now-since, 1) // counted only since it became hot
		}
		hk.settle(rs.limiterTime(now))
		if hk.leased.Load() && !leaving {
			d.Held, d.HeldEpoch, d.HeldSeq = hk.held, hk.epoch, hk.seq
			if kr.Algorithm.Windowed() {
				d.NextHeld = hk.nextHeld
			}
		}
		if kr.Algorithm.Windowed() {
			// What it spent, in full for a fixed window (UsedAt): Limit −
			// Remaining would say a lowered lease's limit, and the division
			// would hand the difference to another node (11 of a quota of
			// 10 after a reset, under load).
			d.Committed = float64(hk.lim.UsedAt(rs.limiterTime(now)))
			d.WindowUnixNano = kr.WindowStart(nowT).UnixNano()
		}
		req.Demand = append(req.Demand, d)
		held = append(held, hk)
	}
	for _, rs := range c.rules {
		if !rs.coordinated {
			continue
		}
		for _, hk := range *rs.hot.Load() {
			add(rs, hk)
		}
		if rs.fair != nil {
			// In a fixed order: the coordinator shares a global rule out
			// class by class, breaking ties in the order classes arrive,
			// so the same traffic must report them the same way.
			classes := slices.Collect(maps.Values(*rs.fair.classes.Load()))
			slices.SortFunc(classes, func(x, y *hotKey) int {
				return cmp.Or(strings.Compare(x.tenant, y.tenant), cmp.Compare(x.priority, y.priority))
			})
			for _, hk := range classes {
				add(rs, hk)
			}
		}
	}
	return req, held
}

// answered applies a coordinator's answer.
func (r *reporter) answered(resp *allotpb.ReportResponse, held []*hotKey, t0, t1 int64) {
	a := r.a
	r.answeredCount.Add(1)
	r.accepted()
	a.clock.observe(t0, t1, resp.GetReceivedUnixNano(), resp.GetCoordinatorUnixNano())
	now := a.clock.now()
	r.lastOK = now
	r.lastAnswer.Store(now)
	for len(r.pending) > 0 && resp.GetAckedSeq() >= r.pending[0].GetSeq() {
		r.setPending(r.pending[1:])
	}
	if iv := resp.GetReportIntervalNano(); iv > 0 {
		a.intervalNs.Store(iv)
	}
	if ttl := resp.GetLeaseTtlNano(); ttl > 0 {
		r.ttl = time.Duration(ttl)
	}
	if w := resp.GetBillingWindowNano(); w >= int64(time.Second) {
		r.window = time.Duration(w)
	}
	if r.client != nil {
		r.client.Learn(resp.GetCoordinators())
	}
	if rs := resp.GetRules(); rs != nil && len(a.cfg.Rules) == 0 && rs.GetVersion() != r.version {
		r.installRules(rs)
	} else if rs == nil && len(a.cfg.Rules) == 0 && sourceOf(a.rules.Load()) != sourceCluster && resp.GetRulesVersion() == r.version {
		// The cluster has never had rules (the version this agent asks
		// with, 0): it answered, so its rule set is the empty one.
		r.installRules(&allotpb.RuleSet{Version: r.version})
	}
	r.takeOverrides(resp.GetOverrides())
	r.expireOverrides(a.clock.now())
	r.takeResets(resp.GetResets())
	if n := int64(resp.GetNodes()); n > 0 && n != a.nodes.Load() {
		a.nodes.Store(n)
		r.reshare()
	}
	r.cacheRules(nil)
	c := a.rules.Load()
	if c == nil {
		return
	}
	if r.applyLeases(c, resp, held, now) {
		// A lease was lowered: the next early report says the key holds
		// it, and the room it gave up goes to others a round later.
		a.askEarly()
	}
	if r.cutOff {
		r.cutOff = false
		for _, rs := range c.rules {
			if rs.coordinated && rs.fallback.Swap(false) {
				a.log.Warn("coordinator reachable again; rule back on leases", "rule", rs.rule.Name)
			}
		}
	}
}

// applyLeases installs new leases, renews the unchanged ones, and reverts
// keys whose lease ran out to their unleased share. It reports whether a
// lease lowered what a key held (hotKey.confirm).
func (r *reporter) applyLeases(c *compiled, resp *allotpb.ReportResponse, held []*hotKey, now int64) (lowered bool) {
	a := r.a
	byName := make(map[string]*ruleState, len(c.rules))
	for _, rs := range c.rules {
		byName[rs.rule.Name] = rs
	}
	got := map[*hotKey]bool{}
	for _, pl := range resp.GetLeases() {
		rs := byName[pl.GetRule()]
		if rs == nil || !rs.coordinated {
			continue
		}
		var hk *hotKey
		if rs.fair != nil {
			hk = rs.fair.class(a, pl.GetTenant(), pl.GetPriority())
		} else {
			hk = rs.byKey[pl.GetKey()]
		}
		if hk == nil {
			continue
		}
		l := lease.Lease{Limit: pl.GetLimit(), Burst: pl.GetBurst(), Expires: time.Unix(0, pl.GetExpiresUnixNano()), Epoch: pl.GetEpoch(), Seq: pl.GetSeq(),
			Window: time.Unix(0, pl.GetWindowUnixNano()), Next: pl.GetNextLimit()}
		hk.applyLease(rs, l, resp.GetEpoch() < hk.epoch, rs.limiterTime(now))
		got[hk] = true
		lowered = lowered || hk.confirm
	}
	for _, hk := range held {
		if hk.leased.Load() && !got[hk] && resp.GetRenewUnixNano() > 0 {
			hk.expires = max(hk.expires, resp.GetRenewUnixNano())
		}
	}
	for _, rs := range c.rules {
		if !rs.coordinated {
			continue
		}
		for _, hk := range *rs.hot.Load() {
			hk.expire(rs, now)
		}
		if rs.fair != nil {
			r.fairTotal(rs, now)
		}
		rs.logRefused(r.a, now)
	}
	return lowered
}

// dropLease returns a key to its unleased share as its rule goes onto the
// fallback fail mode, counting the lease it held as expired.
func (rs *ruleState) dropLease(hk *hotKey, now int64) {
	if hk.leased.Load() {
		rs.expiries.Add(1)
	}
	hk.unlease(rs, rs.limiterTime(now))
}

// fairTotal sizes a global rule's node total: the sum of its classes'
// leases, or the unleased share while it holds none.
func (r *reporter) fairTotal(rs *ruleState, now int64) {
	total, leased := 0.0, false
	for _, hk := range *rs.fair.classes.Load() {
		hk.expire(rs, now)
		if hk.leased.Load() {
			total += hk.held
			leased = true
		}
	}
	st := rs.def
	if !leased {
		total = rs.shareOf(st.limit, r.a.cfg.Region, int(r.a.nodes.Load()))
	}
	st.setShare(rs, total, rs.limiterTime(now))
}

// failed handles a report no coordinator answered. After a lease period
// without an answer, every coordinated rule goes onto its fail mode.
func (r *reporter) failed(now int64, err error) {
	a := r.a
	r.refused(now, err)
	if r.cutOff || now-r.lastOK < int64(r.ttl) {
		// Failing for more than two intervals is worth a warning, at most
		// one every ten seconds: a node whose reports fail is billing
		// nobody and drifting toward its fail modes.
		if !r.cutOff && now-r.lastOK >= 2*int64(a.interval()) && now-r.lastWarn >= int64(10*time.Second) {
			r.lastWarn = now
			a.log.Warn("reports to the coordinators are failing", "since", time.Duration(now-r.lastOK).Round(time.Millisecond), "pending_batches", len(r.pending), "error", err)
		} else {
			a.log.Debug("report failed", "error", err)
		}
		return
	}
	r.cutOff = true
	c := a.rules.Load()
	if c == nil {
		return
	}
	for _, rs := range c.rules {
		if !rs.coordinated {
			continue
		}
		rs.fallback.Store(true)
		a.log.Warn("no coordinator answered for a lease period; rule on its fail mode",
			"rule", rs.rule.Name, "intent", rs.rule.Intent.String(), "fail_mode", rs.mode.String(), "error", err)
		switch rs.mode {
		case lease.FailFallback:
			// Each node enforces limit ÷ nodes last seen: the unleased
			// share. The leases held ran out unrenewed a lease period
			// ago, and are counted as expired.
			for _, hk := range *rs.hot.Load() {
				rs.dropLease(hk, now)
			}
			if rs.fair != nil {
				for _, hk := range *rs.fair.classes.Load() {
					rs.dropLease(hk, now)
				}
				r.fairTotal(rs, now) // no class leased: the unleased share
			}
		case lease.FailOpen:
			// Keep serving on the last lease, however old.
			for _, hk := range *rs.hot.Load() {
				hk.expires = 1<<63 - 1
			}
		}
	}
}
