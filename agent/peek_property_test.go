package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"github.com/allot-io/allot/rules/rulestest"
	"pgregory.net/rapid"
)

// TestPropertyPeekAnswersAsCheck: for any rule set, any history and any
// request, a peek answers as Check answers the same request at that
// instant (the same verdict, rule, limit and wait, with what was left
// before the request where Check says what it left) and spends nothing:
// an agent peeked at before every request decides each one as a twin
// never peeked does, bills the same usage, and counts the same shadow
// refusals and fail-mode decisions. The history includes what a
// coordinator does to an agent: keys made hot and leased, a global rule's
// classes leased, rules put on their fail modes.
func TestPropertyPeekAnswersAsCheck(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := peekableRules(t)
		clk := newManualClock()
		a, twin := propertyAgent(t, clk, rs), propertyAgent(t, clk, rs)
		pool := newRequestPool(rs)
		both := func(f func(*Agent)) { f(a); f(twin) }
		t.Repeat(map[string]func(*rapid.T){
			"": func(t *rapid.T) {
				if a, b := liveUsageOf(a), liveUsageOf(twin); a != b {
					t.Fatalf("usage: peeked %v, twin %v", a, b)
				}
				if a, b := ruleCounts(a), ruleCounts(twin); a != b {
					t.Fatalf("shadow refusals and fail-mode decisions: peeked %s, twin %s", a, b)
				}
			},
			"advance": func(t *rapid.T) {
				clk.Advance(time.Duration(rapid.Int64Range(0, int64(2*time.Second)).Draw(t, "by")))
			},
			"hot": func(t *rapid.T) {
				i := rapid.IntRange(0, len(rs)-1).Draw(t, "rule")
				req := pool.draw(t)
				limit := rapid.Float64Range(0, 10).Draw(t, "lease")
				both(func(a *Agent) { makeHot(a, rs[i].Name, &req, limit) })
			},
			"fallback": func(t *rapid.T) {
				i := rapid.IntRange(0, len(rs)-1).Draw(t, "rule")
				on := rapid.Bool().Draw(t, "on")
				both(func(a *Agent) {
					if s := ruleNamed(a, rs[i].Name); s != nil {
						s.fallback.Store(on)
					}
				})
			},
			"request": func(t *rapid.T) {
				req := pool.draw(t)
				for range rapid.IntRange(0, 2).Draw(t, "otherPeeks") {
					o := pool.draw(t)
					o.Peek = true
					a.Check(o)
				}
				peek := req
				peek.Peek = true
				p := a.Check(peek)
				if again := a.Check(peek); again != p {
					t.Fatalf("a second peek of %+v answered %+v, the first %+v", req, again, p)
				}
				d, tw := a.Check(req), twin.Check(req)
				if d != tw {
					t.Fatalf("%+v after peeks: %+v; the twin never peeked: %+v", req, d, tw)
				}
				peekAnswersAs(t, &req, p, d)
			},
		})
	})
}

// peekAnswersAs fails t unless peek p answers as d, the decision of req.
func peekAnswersAs(t *rapid.T, req *Request, p, d Decision) {
	t.Helper()
	if !d.Allowed || d.Rule == "" {
		// Refused, spending nothing: the same figures. Or admitted by no
		// rule: none.
		if p != d {
			t.Fatalf("%+v: peek %+v; the request %+v", req, p, d)
		}
		return
	}
	if p.Rule != d.Rule {
		t.Fatalf("%+v: peek %+v names %q; the request was decided by %q: %+v", req, p, p.Rule, d.Rule, d)
	}
	q := p
	// What the request left, plus its cost, is what was left before it;
	// unless it was admitted without spending (exempt, with nothing left).
	if cost := max(req.Cost, 1); q.Available-cost == d.Available {
		q.Available = d.Available
	} else if !(req.Priority == Exempt && q.Available == d.Available) {
		t.Fatalf("%+v: peek %+v shows %d left before it; admitted %+v, which left %d", req, p, p.Available, d, d.Available)
	}
	if p.Remaining < d.Remaining {
		t.Fatalf("%+v: peek %+v shows less left before it than the request left: %+v", req, p, d)
	}
	q.Remaining = d.Remaining // scaled to the whole limit: compared as Available
	// When the limit resets is the state's, before the request or after
	// (a window the request opened), as algo's PeekAt says.
	q.ResetAfter = d.ResetAfter
	if q != d {
		t.Fatalf("%+v: peek %+v; admitted %+v", req, p, d)
	}
}

// peekableRules draws a rule set Check enforces: rulestest's, with no
// regions (the node has none), limits small enough to be reached, and
// global rules unstriped (a stripe's figures are an estimate,
// algo.Striped, where the property compares exact ones).
func peekableRules(t *rapid.T) []rules.Rule {
	rs := rulestest.Rules().Filter(func(rs []rules.Rule) bool {
		for _, r := range rs {
			if r.Scope != rules.Descriptor && !r.Unlimited {
				return true
			}
		}
		return false
	}).Draw(t, "rules")
	for i := range rs {
		r := &rs[i]
		r.Regions = nil
		if r.Unlimited || r.Scope == rules.Descriptor {
			continue
		}
		small := func(n int64) int64 {
			if n <= 0 {
				return n
			}
			return 1 + n%8
		}
		r.Limit = small(r.Limit)
		for name, p := range r.Plans {
			p.Limit = small(p.Limit)
			r.Plans[name] = p
		}
		for name, o := range r.Tenants {
			o.Limit = small(o.Limit)
			r.Tenants[name] = o
		}
		r.Burst = min(r.Burst, 2*r.Limit)
		if r.Scope == rules.Global {
			none := 0.0
			r.Tolerance = &none
		}
	}
	return rs
}

// propertyAgent is a standalone agent enforcing rs on clk's time. Its
// background loops run on the system's timers, at an interval no test
// reaches: a cut of the usage counters is a housekeeping goroutine's,
// and would land at another moment in each of two agents.
func propertyAgent(t *rapid.T, clk Clock, rs []rules.Rule) *Agent {
	a, err := New(Config{Rules: rs, Clock: nowOnly{clk}, ReportInterval: time.Hour})
	if err != nil {
		t.Fatalf("the agent refused the rules: %v", err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

// nowOnly is a Clock that makes no timers.
type nowOnly struct{ c Clock }

func (n nowOnly) Now() time.Time { return n.c.Now() }

// requestPool draws requests whose attributes the rules name: their
// matched and overridden tenants, plans and routes, and some of none.
type requestPool struct {
	tenants, plans, routes []string
}

func newRequestPool(rs []rules.Rule) *requestPool {
	p := &requestPool{tenants: []string{"acme", "beta"}, plans: []string{"", "free"}, routes: []string{"/v1/a"}}
	for _, r := range rs {
		p.tenants = append(p.tenants, r.Match.Tenants...)
		p.plans = append(p.plans, r.Match.Plans...)
		for name := range r.Tenants {
			p.tenants = append(p.tenants, name)
		}
		for name := range r.Plans {
			p.plans = append(p.plans, name)
		}
		for _, route := range r.Match.Routes {
			p.routes = append(p.routes, strings.TrimSuffix(route, "*")+"x")
		}
	}
	// In one order whatever the maps': rapid replays a failure by its draws.
	for _, l := range []*[]string{&p.tenants, &p.plans, &p.routes} {
		slices.Sort(*l)
		*l = slices.Compact(*l)
	}
	return p
}

func (p *requestPool) draw(t *rapid.T) Request {
	return Request{
		Tenant:   rapid.SampledFrom(p.tenants).Draw(t, "tenant"),
		Plan:     rapid.SampledFrom(p.plans).Draw(t, "plan"),
		Route:    rapid.SampledFrom(p.routes).Draw(t, "route"),
		User:     rapid.SampledFrom([]string{"ann", "bob"}).Draw(t, "user"),
		IP:       rapid.SampledFrom([]string{"10.0.0.1", "10.0.0.2"}).Draw(t, "ip"),
		Priority: rapid.SampledFrom([]Priority{Interactive, Batch, Critical, Exempt}).Draw(t, "priority"),
		Cost:     rapid.SampledFrom([]int64{0, 1, 1, 1, 2, 3, 5, 9, MaxCost + 1}).Draw(t, "cost"),
	}
}

// makeHot makes req's key under the named rule a hot key (a global rule's
// request class, for a global rule) holding a lease of limit, as a
// coordinator's answer does: limit 0 makes it hot without a lease.
func makeHot(a *Agent, name string, req *Request, limit float64) {
	rs := ruleNamed(a, name)
	if rs == nil || rs.descriptor {
		return // not enforced, or decided by CheckDescriptors alone
	}
	now := a.clock.now()
	lt := rs.limiterTime(now)
	l := lease.Lease{Limit: limit, Epoch: 1, Seq: uint64(now), Expires: time.Unix(0, now).Add(time.Hour), Window: lt.Truncate(rs.rule.Period)}
	if rs.fair != nil {
		ck := classKey{a.hasher.String(req.Tenant), classPriority(rs, req)}
		classes := *rs.fair.classes.Load()
		hk := classes[ck]
		if hk == nil {
			var err error
			if hk, err = newHotKey(rs, rs.def, pendingKey{tenant: req.Tenant, priority: ck.priority}, a.clock.local()); err != nil {
				return
			}
			next := map[classKey]*hotKey{ck: hk}
			for k, v := range classes {
				next[k] = v
			}
			rs.fair.classes.Store(&next)
		}
		if limit > 0 {
			hk.applyLease(rs, l, false, lt)
		}
		return
	}
	var rh reqHashes
	h := rs.keyHash(a, &rh, req)
	hot := *rs.hot.Load()
	if hot[h] == nil {
		var buf keyBuf
		rs.pending.add(h, encodeKey(&buf, rs.attrs, req), req, 0)
		rs.promote(a, lt)
	}
	if hk := (*rs.hot.Load())[h]; hk != nil && limit > 0 {
		hk.applyLease(rs, l, false, lt)
	}
}

// ruleNamed is the agent's rule of that name, or nil.
func ruleNamed(a *Agent, name string) *ruleState {
	for _, rs := range a.rules.Load().rules {
		if rs.rule.Name == name {
			return rs
		}
	}
	return nil
}

// liveUsageOf is what the agent's usage counters hold, as text.
func liveUsageOf(a *Agent) string { return fmt.Sprint(a.rules.Load().usage.live()) }

// ruleCounts are the rules' shadow refusals and fail-mode decisions.
func ruleCounts(a *Agent) string {
	var b strings.Builder
	for _, rs := range a.rules.Load().rules {
		fmt.Fprintf(&b, "%s:%d/%d ", rs.rule.Name, rs.shadowed.Load(), rs.fellBack.Load())
	}
	return b.String()
}
