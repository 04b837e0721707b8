package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/agentdrive"
	"github.com/allot-io/allot/internal/timeutil"
	"github.com/allot-io/allot/internal/tracing"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"
)

// Agent decides requests in the gateway's memory against the node's
// leases, and reports usage to the coordinators in the background. It is
// safe for concurrent use.
type Agent struct {
	cfg Config
	// manual is set when the agent's reports are driven by its transport's
	// owner, the simulator (drive.go): it starts no goroutine.
	manual bool
	log    hclog.Logger
	hasher *algo.Hasher
	clock  *clock
	// ts makes the background loops' timers: Config.Clock's when it makes
	// them (a timeutil.Manual in tests: the loops run in virtual time),
	// the system's otherwise.
	ts timeutil.TimeSource

	rules      atomic.Pointer[compiled]
	nodes      atomic.Int64 // nodes the coordinators hear from; 1 standalone
	intervalNs atomic.Int64
	ready      chan struct{}
	readyOnce  sync.Once

	prioHash [256]algo.Hash // mixed into a tenant's hash to name a class

	rep   *reporter // nil when standalone
	early chan struct{}
	// lastEarly is when the last early report went, on the agent's clock;
	// earlyHold, until when early reports wait (holdEarly).
	lastEarly, earlyHold atomic.Int64
	stop                 chan struct{}
	wg                   sync.WaitGroup
	closed               atomic.Bool
	metrics              *metrics
	// invalid counts checks refused for a cost above MaxCost.
	invalid atomic.Int64
	// peeks counts the peeks answered (Request.Peek, Descriptor.Peek), by
	// result: admitted, denied. They are counted nowhere else: not as
	// decisions, nor billed.
	peeks [2]atomic.Int64
	// reserved are the open reservations (reserve.go).
	reserved reservations
	// untilDecisions counts the checks decided without the cluster's
	// rules, by untilDecisionLabels.
	untilDecisions [len(untilDecisionLabels)]atomic.Int64
	// joining is set while a coordinated agent's process is new to the
	// fleet, its first few reports not yet answered; born is when it
	// started (local clock). See joinReports.
	joining atomic.Bool
	born    int64
	// tracer is Config.TracerProvider's; nil when tracing is off.
	tracer trace.Tracer
}

// compiled is a rule set ready to enforce, with its usage counters.
type compiled struct {
	// source is where the set came from; standIn is set when it stands
	// in for the cluster's rules until they arrive (the start-up rules or
	// the rules cache): its decisions are counted apart.
	source  rulesSource
	standIn bool
	set     *rules.Set
	rules   []*ruleState // the rules enforced, in evaluation order
	names   []string
	usage   *usageTable
	totals  []ruleTotals
	// problems are the set's rules not enforced here, and why.
	problems []RuleProblem
	// domains holds the descriptor rules by Envoy domain.
	domains map[string][]descRule
	// nested holds, for each rule, the rules nested in it: coordinated
	// per-key rules (not a global rule's classes) whose key attributes
	// include all of its own, so that one of its keys decides each of
	// their keys and every request of theirs passes through it. A request
	// it refuses is still their demand: it never reaches them, or they
	// give back what they took, yet all of it returns to them once the
	// refuser has room (a re-division, the next window). Hidden, a route
	// key's lease fell to what its node had spent while its tenant's
	// quota held the node back, and the route refused the tenant's
	// traffic when the quota came back, until an early report was
	// answered. Traffic a rule not decided by the refuser's key refuses
	// (a user's own limit, for a route) is only part of theirs, and stays
	// out of their demand.
	nested []ruleBits
}

// New starts an agent. A standalone agent (no Coordinators) enforces its
// static Rules at once. An agent with coordinators reports in the
// background and enforces the rules they send; until they arrive it
// enforces its rules cache (Config.RulesCacheFile) if it has one, and
// otherwise follows Config.UntilRules: by default (UntilRulesClosed) it
// refuses every request. Ready is closed once it enforces rules: static,
// cached, start-up or the cluster's.
func New(config Config) (*Agent, error) {
	cfg, err := config.withDefaults()
	if err != nil {
		return nil, err
	}
	_, manual := cfg.Transport.(agentdrive.Transport)
	a := &Agent{
		cfg:    cfg,
		manual: manual,
		log:    cfg.Logger.Named("agent"),
		hasher: algo.NewHasher(),
		clock:  newClock(cfg.Clock),
		ts:     timeSource(cfg.Clock),
		ready:  make(chan struct{}),
		early:  make(chan struct{}, 1),
		stop:   make(chan struct{}),
		tracer: tracing.Tracer(cfg.TracerProvider, "github.com/allot-io/allot/agent"),
	}
	a.nodes.Store(1)
	a.reserved.init()
	a.intervalNs.Store(int64(cfg.ReportInterval))
	for i := range a.prioHash {
		a.prioHash[i] = a.hasher.String("\x00priority " + strconv.Itoa(i))
	}
	if len(cfg.Rules) > 0 {
		set, err := rules.NewSet(0, cfg.Rules)
		if err != nil {
			return nil, fmt.Errorf("agent: static rules: %w", err)
		}
		if err := a.install(set, nil, true, sourceStatic); err != nil {
			return nil, err
		}
	} else if cfg.coordinated() {
		if err := a.startRules(); err != nil {
			return nil, err
		}
	}
	if a.metrics, err = newMetrics(a, cfg.Registerer); err != nil {
		return nil, err
	}
	if cfg.coordinated() {
		if a.rep, err = newReporter(a); err != nil {
			return nil, err
		}
		a.born = a.clock.local()
		a.joining.Store(true)
	}
	if d, ok := cfg.Transport.(agentdrive.Transport); ok {
		d.Drive(driven{a}) // the simulator drives everything
		return a, nil
	}
	a.wg.Add(2)
	go func() {
		defer a.wg.Done()
		a.clock.run(a.stop)
	}()
	go func() {
		defer a.wg.Done()
		a.housekeep()
	}()
	if a.rep != nil {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.rep.run()
		}()
	}
	return a, nil
}

// earlyWait is how long before an early report may go: 0 when one may go
// now, which counts it, or the time left until one may. At most ten go an
// interval, on the agent's clock.
func (a *Agent) earlyWait() time.Duration {
	now := a.clock.local()
	if hold := a.earlyHold.Load(); now < hold {
		return time.Duration(hold - now)
	}
	if last := a.lastEarly.Load(); last != 0 && now-last < int64(a.interval()/10) {
		return time.Duration(last + int64(a.interval()/10) - now)
	}
	a.lastEarly.Store(now)
	return 0
}

// holdEarly has early reports wait until until (the agent's clock): the
// leader shed a report, or answers came late or not at all. Regular
// reports go on at their interval.
func (a *Agent) holdEarly(until int64) {
	for {
		cur := a.earlyHold.Load()
		if until <= cur || a.earlyHold.CompareAndSwap(cur, until) {
			return
		}
	}
}

// Ready is closed once the agent enforces rules.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Tracer is the tracer of Config.TracerProvider, for the servers around
// the agent (the sidecar's) to start their spans with; nil when tracing
// is off, which those servers check once per request and nothing more.
func (a *Agent) Tracer() trace.Tracer { return a.tracer }

// Rules returns the rule set the agent enforces, or nil before it has one.
func (a *Agent) Rules() *rules.Set {
	if c := a.rules.Load(); c != nil {
		return c.set
	}
	return nil
}

func (a *Agent) interval() time.Duration { return time.Duration(a.intervalNs.Load()) }

// keyedOptions bounds each store: cardinality, and what a full store does
// with a new key, by the rule's intent.
func (a *Agent) keyedOptions(r *rules.Rule) algo.KeyedOptions {
	o := algo.KeyedOptions{MaxKeys: a.cfg.MaxKeys, IdleTTL: a.cfg.IdleTTL, Hasher: a.hasher}
	switch r.Intent {
	case lease.Quota:
		o.Overflow = algo.OverflowAllow
	case lease.Abuse:
		o.Overflow = algo.OverflowReject
	default:
		o.Overflow = algo.OverflowEvict
	}
	// Shards: about 64 keys each at the bound, no fewer than 16.
	o.Shards = min(max(a.cfg.MaxKeys/64, 16), 1024)
	return o
}

// install compiles a rule set and makes it the one enforced. Rules that
// did not change keep their state; the usage counted under the old set is
// cut by the caller first (the reporter), so counts are never lost.
//
// A rule that does not apply in the node's region, or cannot be enforced,
// affects only itself: it is left out and listed among the set's problems
// (with those the caller found converting the set), while the others are
// enforced. With strict set (static rules, read at start) either is an
// error instead, for the operator to fix.
func (a *Agent) install(set *rules.Set, problems []RuleProblem, strict bool, source rulesSource) error {
	old := a.rules.Load()
	prev := map[string]*ruleState{}
	if old != nil {
		for _, rs := range old.rules {
			prev[rs.rule.Name] = rs
		}
	}
	nodes := int(a.nodes.Load())
	c := &compiled{set: set, problems: problems, source: source, standIn: source.standIn()}
	for _, r := range set.Rules() {
		if r.Unlimited {
			continue // limits nothing: found by CheckDescriptors alone
		}
		i := len(c.rules)
		rs := &ruleState{
			rule: r, scope: r.Scope.String(), index: i, attrs: r.KeyAttrs(),
			coordinated: !r.Local && a.cfg.coordinated() && source != sourceStartup, mode: r.Mode(),
			descriptor: r.Scope == rules.Descriptor, windowed: r.Algorithm.Windowed(), clk: a.clock,
		}
		rs.every = rs.coversAll()
		if i >= maxRules {
			err := fmt.Errorf("agent: rule %s is beyond the %d rules the agent enforces from one set", r.Name, maxRules)
			if strict {
				return err
			}
			c.problems = append(c.problems, RuleProblem{Rule: r.Name, Problem: ProblemBroken, Reason: err.Error()})
			continue
		}
		if r.LeavesOut(a.cfg.Region) {
			err := fmt.Errorf("agent: rule %s divides its limit among regions %v, and this node's region %q has no share: add the region to the rule or run the node in one of those", r.Name, sortedRegions(r.Regions), a.cfg.Region)
			if strict {
				return err
			}
			c.problems = append(c.problems, RuleProblem{Rule: r.Name, Problem: ProblemOtherRegion, Reason: err.Error()})
			continue
		}
		p := prev[r.Name]
		// A rule kept unchanged keeps its state, unless it changes from
		// local (start-up rules) to coordinated: its shares differ.
		if p != nil && p.coordinated == rs.coordinated && rules.Equal(&p.rule, &r) {
			rs.ruleData = p.ruleData
		} else {
			data, err := a.newRuleData(rs, nodes)
			if err != nil {
				err = fmt.Errorf("agent: rule %s: %w", r.Name, err)
				if strict {
					return err
				}
				c.problems = append(c.problems, RuleProblem{Rule: r.Name, Problem: ProblemBroken, Reason: err.Error()})
				continue
			}
			rs.ruleData = data
		}
		rs.makeStore = a.overrideStoreMaker(rs)
		if rs.descriptor {
			rs.makeCallStore = a.callStoreMaker(rs)
		}
		c.totals = append(c.totals, ruleTotals{})
		if p != nil {
			// A rule kept by name keeps its totals, changed or not.
			c.totals[i].admitted.Store(old.totals[p.index].admitted.Load())
			c.totals[i].denied.Store(old.totals[p.index].denied.Load())
		}
		c.rules = append(c.rules, rs)
		c.names = append(c.names, r.Name)
	}
	for _, p := range c.problems {
		if p.Problem == ProblemOtherRegion {
			a.log.Info("rule not enforced in this region", "rule", p.Rule, "region", a.cfg.Region)
		} else {
			a.log.Error("rule cannot be enforced; the others are", "rule", p.Rule, "reason", p.Reason)
		}
	}
	var every ruleBits
	for i, rs := range c.rules {
		if rs.coversAll() {
			every.set(i)
		}
	}
	c.usage = newUsageTable(len(c.rules), every, a.cfg.MaxTenants)
	c.nested = nestedRules(c.rules)
	c.indexDescriptors()
	a.rules.Store(c)
	a.readyOnce.Do(func() { close(a.ready) })
	return nil
}

// nestedRules is compiled.nested for rules.
func nestedRules(rs []*ruleState) []ruleBits {
	nested := make([]ruleBits, len(rs))
	for i, outer := range rs {
		for j, inner := range rs {
			if i != j && inner.coordinated && inner.fair == nil && !inner.descriptor && attrsWithin(outer.attrs, inner.attrs) {
				nested[i].set(j)
			}
		}
	}
	return nested
}

// attrsWithin reports whether every attribute of outer is one of inner's.
func attrsWithin(outer, inner []rules.Attr) bool {
	for _, at := range outer {
		if !slices.Contains(inner, at) {
			return false
		}
	}
	return true
}

func sortedRegions(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// newRuleData makes a rule's stores: the rule's own, its plans' and its
// tenants entries'. Each enforces its limit's cap (rules.Rule.Cap): the
// limit itself, or with overage the limit times overage.up_to, which the
// coordinators divide alike.
func (a *Agent) newRuleData(rs *ruleState, nodes int) (*ruleData, error) {
	d := &ruleData{}
	rs.ruleData = d
	opts := a.keyedOptions(&rs.rule)
	capOf := rs.rule.Cap
	var err error
	if d.def, err = rs.newLimitStore(capOf(rs.rule.Limit), rules.Anchor{}, a.cfg.Region, nodes, opts); err != nil {
		return nil, err
	}
	for name, p := range rs.rule.Plans {
		if p.Limit > 0 || !p.Cycle.IsZero() {
			if d.byPlan == nil {
				d.byPlan = map[string]*limitStore{}
			}
			limit := capOf(cmp.Or(p.Limit, rs.rule.Limit))
			if d.byPlan[name], err = rs.newLimitStore(limit, p.Cycle, a.cfg.Region, nodes, opts); err != nil {
				return nil, err
			}
		}
	}
	for name, o := range rs.rule.Tenants {
		if o.Limit > 0 {
			if d.byTenant == nil {
				d.byTenant = map[string]*limitStore{}
			}
			if d.byTenant[name], err = rs.newLimitStore(capOf(o.Limit), o.Cycle, a.cfg.Region, nodes, opts); err != nil {
				return nil, err
			}
		}
	}
	d.overrides = newTenantTable()
	if rs.descriptor {
		d.calls = &callLimits{}
	}
	empty := map[algo.Hash]*hotKey{}
	d.hot.Store(&empty)
	if rs.rule.Fair() {
		d.fair = &fairState{}
		none := map[classKey]*hotKey{}
		d.fair.classes.Store(&none)
	}
	return d, nil
}

// Close stops reporting, after flushing the usage not yet reported and
// releasing the node's leases, within ctx, or within Config.CloseTimeout
// when ctx has no deadline: a gateway shutting down while no coordinator
// answers is never held up for longer.
func (a *Agent) Close(ctx context.Context) error {
	if a.closed.Swap(true) {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.cfg.CloseTimeout)
		defer cancel()
	}
	var err error
	if a.rep != nil {
		err = a.rep.shutdown(ctx)
	}
	close(a.stop)
	a.wg.Wait()
	if a.rep != nil && a.rep.client != nil {
		a.rep.client.Close()
	}
	if a.metrics != nil {
		a.metrics.unregister()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("agent: closing: %w", err)
	}
	return nil
}

// housekeep expires idle keys in the background once a minute, and, for a
// standalone agent (which has no reporter to do it), cuts the usage
// counters every interval so that metrics and new tenants stay cheap.
func (a *Agent) housekeep() {
	t := a.ts.NewTicker(a.cfg.ReportInterval)
	defer t.Stop()
	lastSweep := a.clock.local()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C():
		}
		c := a.rules.Load()
		if c == nil {
			continue
		}
		if a.rep == nil {
			c.usage.cut(c.names, 0, nil, c.totals, nil)
		}
		if a.clock.local()-lastSweep >= int64(time.Minute) {
			lastSweep = a.clock.local()
			now := a.clock.now()
			for _, rs := range c.rules {
				for _, st := range rs.stores() {
					if st.keyed != nil {
						st.keyed.Sweep(rs.limiterTime(now))
					}
				}
			}
		}
	}
}

// askEarly wakes the reporter for an early report, without waiting.
func (a *Agent) askEarly() {
	select {
	case a.early <- struct{}{}:
	default:
	}
}

// Share returns the node's current share of a rule's limit for a key, per
// the rule's period: the lease it holds, or its unleased share. For a
// global rule (key ignored) it is the node's total. For dashboards and
// demos.
func (a *Agent) Share(rule, key string) float64 {
	if l, ok := a.Lease(rule, key); ok {
		return l
	}
	c := a.rules.Load()
	if c == nil {
		return 0
	}
	for _, rs := range c.rules {
		if rs.rule.Name == rule {
			rs.def.mu.Lock()
			defer rs.def.mu.Unlock()
			return rs.def.share
		}
	}
	return 0
}

// Lease returns the lease the node holds for a rule's key, per the rule's
// period, and whether it holds one (a global rule's total is never
// leased as a key). For dashboards and demos.
func (a *Agent) Lease(rule, key string) (float64, bool) {
	c := a.rules.Load()
	if c == nil {
		return 0, false
	}
	for _, rs := range c.rules {
		if rs.rule.Name != rule || rs.fair != nil {
			continue
		}
		hot := *rs.hot.Load()
		hk := hot[a.hasher.String(key)] // a single-attribute key hashes as itself
		if hk == nil {
			for _, h := range hot {
				if h.key == key {
					hk = h
					break
				}
			}
		}
		if hk != nil && hk.leaseLimit() > 0 {
			return hk.leaseLimit(), true
		}
		return 0, false
	}
	return 0, false
}
