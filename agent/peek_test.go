package agent

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"github.com/prometheus/client_golang/prometheus"
)

// liveUsage is what the usage counters hold, admitted and denied, over
// every rule: what the next report bills.
func liveUsage(a *Agent) (admitted, denied int64) {
	for i, n := range a.rules.Load().usage.live() {
		if i%2 == 0 {
			admitted += n
		} else {
			denied += n
		}
	}
	return admitted, denied
}

// peekRules are a rule of each algorithm, limit 3, for TestPeek.
func peekRules() []rules.Rule {
	var out []rules.Rule
	for _, alg := range algo.Algorithms() {
		r := rule("per-user", rules.User, alg, 3, time.Minute, lease.Capacity)
		if alg == algo.GCRA {
			r.Burst = 2 // GCRA admits 1+Burst at once
		}
		if alg == algo.TokenBucket {
			r.Burst = 3
		}
		out = append(out, r)
	}
	return out
}

// TestPeek: a peek answers as a request of its cost would be answered
// now, under each algorithm: after n requests it shows what they left,
// many peeks never exhaust the limit, and at the limit it is refused with
// the wait a request would get. Nothing a peek does is counted or
// billed, and a request after any number of peeks is decided as if they
// had not happened.
func TestPeek(t *testing.T) {
	for _, r := range peekRules() {
		for _, tc := range []struct {
			name     string
			checks   int   // real checks first
			cost     int64 // the peek's
			allowed  bool
			windowed int64 // the remaining a window rule shows, exactly
		}{
			{"fresh", 0, 0, true, 3},
			{"after 1", 1, 0, true, 2},
			{"after 2", 2, 1, true, 1},
			{"at the limit", 3, 0, false, 0},
			{"cost 2 of 1 left", 2, 2, false, 1},
			{"cost 2 of 3 left", 0, 2, true, 3},
			{"cost over the limit", 0, 4, false, 3},
		} {
			t.Run(r.Algorithm.String()+"/"+tc.name, func(t *testing.T) {
				clk := newManualClock()
				a := standalone(t, clk, r)
				twin := standalone(t, clk, r) // never peeked
				req := Request{Tenant: "acme", User: "ann"}
				left := int64(3) // what the last real check left, scaled
				for i := range tc.checks {
					d := a.Check(req)
					twin.Check(req)
					if !d.Allowed {
						t.Fatalf("check %d refused: %+v", i+1, d)
					}
					left = d.Remaining
				}
				adm, den := liveUsage(a)
				peek := req
				peek.Peek, peek.Cost = true, tc.cost
				var p Decision
				for range 100 {
					p = a.Check(peek)
				}
				if p.Allowed != tc.allowed || p.Rule != "per-user" || p.Limit != 3 {
					t.Fatalf("peek %+v; want allowed %v under per-user, limit 3", p, tc.allowed)
				}
				if p.Remaining != left {
					t.Errorf("peek remaining %d; the last check left %d", p.Remaining, left)
				}
				if r.Algorithm.Windowed() && p.Remaining != tc.windowed {
					t.Errorf("peek remaining %d; want %d", p.Remaining, tc.windowed)
				}
				// The answer a request of the peek's cost gets now.
				real := req
				real.Cost = tc.cost
				d := twin.Check(real)
				if d.Allowed != p.Allowed || !d.Allowed && d.RetryAfter != p.RetryAfter {
					t.Errorf("peek %+v; a request of its cost got %+v", p, d)
				}
				if !p.Allowed && (p.RetryAfter == 0 || tc.cost <= 3 && p.RetryAfter < 0) {
					t.Errorf("a refused peek says retry after %v", p.RetryAfter)
				}
				if tc.cost > 3 && p.RetryAfter >= 0 {
					t.Errorf("a peek over the limit says retry after %v; want never", p.RetryAfter)
				}
				if a2, d2 := liveUsage(a); a2 != adm || d2 != den {
					t.Errorf("peeks moved the usage counters from %d/%d to %d/%d", adm, den, a2, d2)
				}
				// The request after the peeks is decided as the twin's was.
				if got := a.Check(real); got != d {
					t.Errorf("after 100 peeks a request got %+v; never peeked, %+v", got, d)
				}
				want := int64(100)
				if !tc.allowed {
					want = 0
				}
				if a.peeks[0].Load() != want || a.peeks[0].Load()+a.peeks[1].Load() != 100 {
					t.Errorf("peeks counted %d admitted, %d denied; want %d of 100 admitted", a.peeks[0].Load(), a.peeks[1].Load(), want)
				}
			})
		}
	}
}

// TestPeekHierarchy: a peek is asked of every rule the request matches;
// the first that would refuse it decides, else the one the request would
// leave closest to its limit, and a shadow rule that would refuse it does
// not.
func TestPeekHierarchy(t *testing.T) {
	clk := newManualClock()
	shadow := rule("trial", rules.Tenant, algo.FixedWindow, 1, time.Minute, lease.Quota)
	shadow.Shadow = true
	a := standalone(t, clk, shadow,
		rule("per-tenant", rules.Tenant, algo.FixedWindow, 10, time.Minute, lease.Quota),
		rule("per-user", rules.User, algo.FixedWindow, 4, time.Minute, lease.Capacity))
	ann, bob := Request{Tenant: "acme", User: "ann"}, Request{Tenant: "acme", User: "bob"}
	for range 2 {
		a.Check(ann)
	}
	var trial *ruleState
	for _, rs := range a.rules.Load().rules {
		if rs.rule.Name == "trial" {
			trial = rs
		}
	}
	shadowed := trial.shadowed.Load() // ann's second request
	for _, tc := range []struct {
		req       Request
		allowed   bool
		rule      string
		remaining int64
	}{
		{Request{Tenant: "acme", User: "ann", Peek: true}, true, "per-user", 2},                 // 2 of 4 left, 8 of 10
		{Request{Tenant: "acme", User: "bob", Peek: true}, true, "per-tenant", 8},               // 4 of 4, 8 of 10
		{Request{Tenant: "acme", User: "ann", Peek: true, Cost: 3}, false, "per-user", 2},       // 3 > 2 left
		{Request{Tenant: "acme", User: "bob", Peek: true, Cost: 9}, false, "per-tenant", 8},     // 9 > 8 left
		{Request{Tenant: "other", User: "ann", Peek: true, Cost: 4}, true, "per-user", 4},       // it would leave 0 of 4, 6 of 10
		{Request{Tenant: "acme", User: "carol", Peek: true, Cost: 4}, true, "per-user", 4},      // 0 of 4, 4 of 10
		{Request{Tenant: "acme", User: "carol", Peek: true, Cost: 5}, false, "per-user", 4},     // per-tenant would admit it
		{Request{Tenant: "fresh", User: "dave", Peek: true, Cost: 11}, false, "per-tenant", 10}, // over the tenant's limit
	} {
		d := a.Check(tc.req)
		if d.Allowed != tc.allowed || d.Rule != tc.rule || d.Remaining != tc.remaining {
			t.Errorf("%+v: %+v; want allowed %v by %s, remaining %d", tc.req, d, tc.allowed, tc.rule, tc.remaining)
		}
	}
	if n := trial.shadowed.Load(); n != shadowed {
		t.Errorf("peeks counted %d shadow refusals", n-shadowed)
	}
	if d := a.Check(bob); !d.Allowed || d.Rule != "per-tenant" || d.Remaining != 7 {
		t.Errorf("bob's request after the peeks: %+v; want admitted, 7 left of acme's 10", d)
	}
}

// peekTransport is a coordinator that acknowledges every usage batch and
// records what it was billed and which keys asked for a lease.
type peekTransport struct {
	mu       sync.Mutex
	acked    uint64
	admitted map[string]uint64
	denied   map[string]uint64
	demand   map[string]bool
}

func (p *peekTransport) Report(_ context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b := req.GetUsage(); b != nil && b.GetSeq() > p.acked {
		for _, c := range b.GetCounts() {
			p.admitted[c.GetTenant()] += c.GetAdmitted()
			p.denied[c.GetTenant()] += c.GetDenied()
		}
		p.acked = b.GetSeq()
	}
	for _, d := range req.GetDemand() {
		p.demand[d.GetKey()] = true
	}
	return &allotpb.ReportResponse{AckedSeq: p.acked, CoordinatorUnixNano: time.Now().UnixNano(), Nodes: 1}, nil
}

func (p *peekTransport) billed(tenant string) (uint64, uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.admitted[tenant], p.denied[tenant], p.demand[tenant]
}

// TestPeekNotBilled: a coordinated agent bills its requests and none of
// its peeks, counts peeks apart from decisions, and a key only peeked at,
// however low, asks for no lease.
func TestPeekNotBilled(t *testing.T) {
	tr := &peekTransport{admitted: map[string]uint64{}, denied: map[string]uint64{}, demand: map[string]bool{}}
	reg := prometheus.NewRegistry()
	a := transportAgent(t, tr, reg, rule("quota", rules.Tenant, algo.FixedWindow, 3, time.Hour, lease.Quota))
	testwait.For(t, 10*time.Second, "the agent to have joined", func() bool { return !a.joining.Load() })
	for range 4 {
		a.Check(Request{Tenant: "acme"})
	}
	for range 50 {
		if d := a.Check(Request{Tenant: "acme", Peek: true}); d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("a peek of acme at its limit: %+v; want refused with a wait", d)
		}
		if d := a.Check(Request{Tenant: "idle", Peek: true, Cost: 3}); !d.Allowed || d.Remaining != 3 {
			t.Fatalf("a peek of idle: %+v; want admitted, 3 left", d)
		}
	}
	testwait.For(t, 10*time.Second, "acme's 3 admitted and 1 denied in the ledger", func() bool {
		adm, den, _ := tr.billed("acme")
		return adm == 3 && den == 1
	})
	// Reports go on meanwhile: what peeks billed would have come with them.
	time.Sleep(5 * 20 * time.Millisecond)
	if adm, den, _ := tr.billed("acme"); adm != 3 || den != 1 {
		t.Errorf("acme billed %d admitted, %d denied; want 3, 1: the peeks were billed", adm, den)
	}
	if adm, den, asked := tr.billed("idle"); adm != 0 || den != 0 || asked {
		t.Errorf("idle, only peeked at, billed %d/%d, asked for a lease %v", adm, den, asked)
	}
	if n := gathered(t, reg, "allot_agent_decisions_total", "quota"); n != 3 {
		t.Errorf("allot_agent_decisions_total{quota,admitted} = %v; want 3", n)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	peeks := map[string]float64{}
	for _, f := range fams {
		if f.GetName() == "allot_agent_peeks_total" {
			for _, m := range f.GetMetric() {
				peeks[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if peeks["admitted"] != 50 || peeks["denied"] != 50 {
		t.Errorf("allot_agent_peeks_total = %v; want 50 admitted, 50 denied", peeks)
	}
}

// TestPeekNoRules: without rules a peek is answered by UntilRules, and
// counted as a peek, not as a decision without rules.
func TestPeekNoRules(t *testing.T) {
	for _, policy := range []UntilRules{UntilRulesOpen, UntilRulesClosed} {
		a, err := New(Config{Coordinators: []string{deadCoordinator}, NodeID: "gw-1", UntilRules: policy, Logger: (&logBuffer{}).logger(), CloseTimeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		d := a.Check(Request{Tenant: "acme", Peek: true})
		if !d.NoRules || d.Allowed != (policy == UntilRulesOpen) {
			t.Errorf("%v: peek without rules: %+v", policy, d)
		}
		for i := range a.untilDecisions {
			if n := a.untilDecisions[i].Load(); n != 0 {
				t.Errorf("%v: a peek counted as %d %s decisions", policy, n, untilDecisionLabels[i])
			}
		}
		if a.peeks[0].Load()+a.peeks[1].Load() != 1 {
			t.Errorf("%v: the peek was not counted", policy)
		}
		a.Close(context.Background())
	}
}

// TestPeekGlobalRule: a global rule's peek (its fair path) answers as its
// requests are, spending nothing of the node's total.
func TestPeekGlobalRule(t *testing.T) {
	clk := newManualClock()
	g := rule("global", rules.Global, algo.FixedWindow, 5, time.Minute, lease.Capacity)
	a := standalone(t, clk, g)
	for range 100 {
		if d := a.Check(Request{Tenant: "acme", Peek: true}); !d.Allowed || d.Remaining != 5 {
			t.Fatalf("peek of a fresh global rule: %+v", d)
		}
	}
	for i := range 5 {
		if d := a.Check(Request{Tenant: "acme"}); !d.Allowed {
			t.Fatalf("request %d refused after peeks: %+v", i+1, d)
		}
	}
	if d := a.Check(Request{Tenant: "acme", Peek: true}); d.Allowed || d.RetryAfter <= 0 || d.Rule != "global" {
		t.Errorf("peek of an exhausted global rule: %+v", d)
	}
	if d := a.Check(Request{Tenant: "acme", Peek: true, Priority: Exempt}); !d.Allowed {
		t.Errorf("an exempt peek refused: %+v", d)
	}
}

// TestCheckPeekAllocatesNothing: a peek on keys already held, and on keys
// never seen (which it does not store), allocates nothing.
func TestCheckPeekAllocatesNothing(t *testing.T) {
	clk := newManualClock()
	one := standalone(t, clk, rule("user", rules.User, algo.GCRA, 1000, time.Second, lease.Capacity))
	four := standalone(t, clk, fourLevels()...)
	req := Request{Tenant: "acme", User: "u-42", Route: "/v1/search", IP: "203.0.113.9"}
	peek, unseen := req, req
	peek.Peek = true
	unseen.Peek, unseen.User = true, "u-never"
	for _, a := range []*Agent{one, four} {
		a.Check(req)
		for _, r := range []Request{peek, unseen} {
			if n := testing.AllocsPerRun(1000, func() { a.Check(r) }); n != 0 {
				t.Errorf("%d rules, user %s: %v allocations per peek", a.Rules().Len(), r.User, n)
			}
		}
	}
}

// TestPeekHotKey: a key with its own limiter (a hot key) is peeked there,
// and its counts for the next report do not move.
func TestPeekHotKey(t *testing.T) {
	clk := newManualClock()
	a := standalone(t, clk, rule("per-user", rules.User, algo.FixedWindow, 100, time.Minute, lease.Capacity))
	rs := a.rules.Load().rules[0]
	lim, err := algo.New(algo.Config{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Tenant: "acme", User: "ann"}
	var rh reqHashes
	hk := &hotKey{key: "acme/ann", store: rs.def, rd: rs.ruleData, lim: lim}
	hk.ready.Store(true)
	rs.hot.Store(&map[algo.Hash]*hotKey{rs.keyHash(a, &rh, &req): hk})
	for range 2 {
		a.Check(req)
	}
	peek := req
	peek.Peek = true
	for range 50 {
		if d := a.Check(peek); !d.Allowed || d.Remaining != 33 { // 1 of the hot key's 3, of 100
			t.Fatalf("peek of a hot key with 1 of 3 left: %+v", d)
		}
	}
	a.Check(req)
	if d := a.Check(peek); d.Allowed || d.RetryAfter <= 0 {
		t.Errorf("peek of a hot key at its limit: %+v", d)
	}
	if adm, den := hk.admitted.Load(), hk.denied.Load(); adm != 3 || den != 0 {
		t.Errorf("the hot key counted %d admitted, %d denied; want its 3 requests", adm, den)
	}
}

// TestPeekNamesTheRuleCheckWould: a peek admitted by several rules names
// the one a request of its cost is decided by, the rule it would leave
// closest to its limit: acme has 50 of its tenant's 100 left (half) and
// ann 3 of her 5 (three fifths), and a request of 2 leaves 48 of 100 and
// 1 of 5. Compared before the request, the peek named the tenant's rule,
// where the request got the user's.
func TestPeekNamesTheRuleCheckWould(t *testing.T) {
	clk := newManualClock()
	a := standalone(t, clk,
		rule("per-tenant", rules.Tenant, algo.FixedWindow, 100, time.Minute, lease.Quota),
		rule("per-user", rules.User, algo.FixedWindow, 5, time.Minute, lease.Capacity))
	for i := range 48 {
		a.Check(Request{Tenant: "acme", User: "u-" + strconv.Itoa(i)})
	}
	for range 2 {
		a.Check(Request{Tenant: "acme", User: "ann"})
	}
	req := Request{Tenant: "acme", User: "ann", Cost: 2}
	peek := req
	peek.Peek = true
	p := a.Check(peek)
	if !p.Allowed || p.Rule != "per-user" || p.Remaining != 3 {
		t.Errorf("peek %+v; want admitted by per-user, 3 left before it", p)
	}
	if d := a.Check(req); !d.Allowed || d.Rule != p.Rule || d.Remaining != 1 {
		t.Errorf("the request: %+v; the peek named %s", d, p.Rule)
	}
}

// TestPeekCountedAtEveryAnswer: a peek is counted once, as admitted or
// denied, at whichever of Check's answers it gets: admitted, refused,
// admitted past a shadow rule that would refuse it, over MaxCost, and by
// a rule set that enforces nothing on Check (its only rule unlimited).
// Check counts a peek where it answers, not by a deferred call.
func TestPeekCountedAtEveryAnswer(t *testing.T) {
	tight := rule("tight", rules.Tenant, algo.FixedWindow, 1, time.Minute, lease.Quota)
	trial := tight
	trial.Name, trial.Shadow = "trial", true
	free := rules.Rule{Name: "internal", Scope: rules.Descriptor, Unlimited: true,
		Match: rules.Match{Domain: "api", Descriptors: []rules.DescriptorEntry{{Key: "internal"}}}}
	for _, tc := range []struct {
		name    string
		rules   []rules.Rule
		spend   int   // requests spent before the peek
		cost    int64 // the peek's
		allowed bool
	}{
		{"admitted", []rules.Rule{tight}, 0, 1, true},
		{"refused", []rules.Rule{tight}, 1, 1, false},
		{"shadow refuses", []rules.Rule{trial}, 1, 1, true},
		{"over MaxCost", []rules.Rule{tight}, 0, MaxCost + 1, false},
		{"no rule on Check", []rules.Rule{free}, 0, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := standalone(t, newManualClock(), tc.rules...)
			req := Request{Tenant: "acme"}
			for range tc.spend {
				a.Check(req)
			}
			req.Peek, req.Cost = true, tc.cost
			if d := a.Check(req); d.Allowed != tc.allowed {
				t.Fatalf("peek: %+v; want allowed %v", d, tc.allowed)
			}
			want := [2]int64{1, 0}
			if !tc.allowed {
				want = [2]int64{0, 1}
			}
			if got := [2]int64{a.peeks[0].Load(), a.peeks[1].Load()}; got != want {
				t.Errorf("peeks counted %d admitted, %d denied; want %d, %d", got[0], got[1], want[0], want[1])
			}
		})
	}
}
