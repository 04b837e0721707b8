package agent

import (
	"context"
	"fmt"
	"github.com/allot-io/allot/internal/timeutil"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// newManualClock is the clock tests move by hand, at a fixed start.
func newManualClock() *timeutil.Manual {
	return timeutil.NewManual(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
}

func rule(name string, scope rules.Scope, alg algo.Algorithm, limit int64, period time.Duration, intent lease.Intent) rules.Rule {
	return rules.Rule{Name: name, Scope: scope, Algorithm: alg, Limit: limit, Period: period, Intent: intent}
}

func standalone(t testing.TB, clk Clock, rs ...rules.Rule) *Agent {
	t.Helper()
	a, err := New(Config{Rules: rs, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

// TestHierarchyAllOrNothing: rules are evaluated cheapest first, the first
// refusal ends the evaluation, and nothing is charged to rules a refused
// request passed.
func TestHierarchyAllOrNothing(t *testing.T) {
	clk := newManualClock()
	a := standalone(t, clk,
		rule("per-user", rules.User, algo.FixedWindow, 3, time.Minute, lease.Capacity),
		rule("global", rules.Global, algo.FixedWindow, 100, time.Minute, lease.Capacity),
		rule("tenant", rules.Tenant, algo.FixedWindow, 5, time.Minute, lease.Quota),
	)
	var order []string
	for _, r := range a.Rules().Rules() {
		order = append(order, r.Name)
	}
	if fmt.Sprint(order) != "[global tenant per-user]" {
		t.Fatalf("evaluation order %v, want cheapest first", order)
	}
	u1 := Request{Tenant: "acme", User: "u1"}
	for i := 0; i < 3; i++ {
		if d := a.Check(u1); !d.Allowed {
			t.Fatalf("request %d refused: %+v", i, d)
		}
	}
	d := a.Check(u1)
	if d.Allowed || d.Rule != "per-user" || d.Scope != "user" || d.Limit != 3 || d.RetryAfter <= 0 {
		t.Fatalf("4th request for u1: %+v, want refused by per-user", d)
	}
	// The refused request charged neither the tenant nor the global rule:
	// u2 still gets the tenant's remaining 2.
	u2 := Request{Tenant: "acme", User: "u2"}
	for i := 0; i < 2; i++ {
		if d := a.Check(u2); !d.Allowed {
			t.Fatalf("u2 request %d refused: %+v", i, d)
		}
	}
	if d := a.Check(u2); d.Allowed || d.Rule != "tenant" {
		t.Fatalf("u2's third request: %+v, want refused by the tenant quota", d)
	}
	// Admitted: 5; the global rule was charged exactly 5.
	if d := a.Check(Request{Tenant: "other", User: "x"}); !d.Allowed || d.Rule != "per-user" {
		t.Fatalf("another tenant: %+v", d)
	}
	g := a.rules.Load().rules[0].def.single.AllowAt(clk.Now(), 0)
	if used := g.Limit - g.Remaining; used != 6 {
		t.Fatalf("global rule charged %d, want 6 (5 + 1 admitted, none refused)", used)
	}
}

func TestCostAndNoRule(t *testing.T) {
	clk := newManualClock()
	a := standalone(t, clk, rules.Rule{Name: "search", Scope: rules.Route, Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second,
		Intent: lease.Capacity, Match: rules.Match{Routes: []string{"/search*"}}})
	if d := a.Check(Request{Tenant: "a", Route: "/other", Cost: 1000}); !d.Allowed || d.Rule != "" {
		t.Fatalf("a route no rule matches: %+v", d)
	}
	if d := a.Check(Request{Tenant: "a", Route: "/search", Cost: 7}); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("cost 7 of 10: %+v", d)
	}
	if d := a.Check(Request{Tenant: "a", Route: "/search", Cost: 4}); d.Allowed {
		t.Fatalf("cost 4 with 3 left: %+v", d)
	}
	if d := a.Check(Request{Tenant: "a", Route: "/search", Cost: 11}); d.Allowed || d.RetryAfter >= 0 {
		t.Fatalf("cost over the limit: %+v, want never", d)
	}
}

// TestPlansAndTenantOverrides: a tenant's plan sets its limit; a tenant
// override beats the plan.
func TestPlansAndTenantOverrides(t *testing.T) {
	r := rule("quota", rules.Tenant, algo.FixedWindow, 2, time.Minute, lease.Quota)
	r.Plans = map[string]rules.Plan{"pro": {Limit: 5}}
	r.Tenants = map[string]rules.TenantOverride{"acme": {Limit: 7}}
	a := standalone(t, newManualClock(), r)
	count := func(req Request) int {
		n := 0
		for i := 0; i < 20; i++ {
			if a.Check(req).Allowed {
				n++
			}
		}
		return n
	}
	if n := count(Request{Tenant: "free-co"}); n != 2 {
		t.Errorf("no plan: %d admitted, want 2", n)
	}
	if n := count(Request{Tenant: "pro-co", Plan: "pro"}); n != 5 {
		t.Errorf("pro plan: %d admitted, want 5", n)
	}
	if n := count(Request{Tenant: "acme", Plan: "pro"}); n != 7 {
		t.Errorf("acme override: %d admitted, want 7", n)
	}
}

// TestPriorityShedding: when the global rule binds, batch is refused
// first, then interactive, and exempt requests never.
func TestPriorityShedding(t *testing.T) {
	clk := newManualClock()
	g := rule("capacity", rules.Global, algo.TokenBucket, 100, time.Second, lease.Capacity)
	a := standalone(t, clk, g)
	admitted := map[Priority]int{}
	for i := 0; i < 100; i++ {
		for _, p := range []Priority{Batch, Interactive, Critical} {
			if a.Check(Request{Tenant: "t", Priority: p}).Allowed {
				admitted[p]++
			}
		}
	}
	if !(admitted[Batch] < admitted[Interactive] && admitted[Interactive] < admitted[Critical]) {
		t.Fatalf("admitted by priority %v; want batch < interactive < critical", admitted)
	}
	if admitted[Batch]+admitted[Interactive]+admitted[Critical] != 100 {
		t.Fatalf("admitted %v in all, want the bucket's 100", admitted)
	}
	for i := 0; i < 50; i++ {
		if d := a.Check(Request{Tenant: "t", Priority: Exempt}); !d.Allowed {
			t.Fatalf("exempt request refused: %+v", d)
		}
	}
}

// TestReserveRefusalResetsAsTheTotal: a request refused for dipping into
// its priority's reserve took nothing, and says when the node's total is
// full again as it stands: 2 of 10 tokens left (one every 6 s) are full
// in 48 s. It said 54 s, the total's reset with the request spent, before
// it was given back.
func TestReserveRefusalResetsAsTheTotal(t *testing.T) {
	clk := newManualClock()
	g := rule("capacity", rules.Global, algo.TokenBucket, 10, time.Minute, lease.Capacity)
	g.Burst = 10
	exact := 0.0 // no stripes: the total's figures are exact
	g.Tolerance = &exact
	a := standalone(t, clk, g)
	for range 8 {
		if d := a.Check(Request{Tenant: "t", Priority: Critical}); !d.Allowed {
			t.Fatalf("refused within the total: %+v", d)
		}
	}
	d := a.Check(Request{Tenant: "t", Priority: Batch})
	if d.Allowed || d.Available != 2 || d.ResetAfter != 48*time.Second {
		t.Errorf("a batch request into the reserve: %+v; want refused, 2 left, reset in 48s", d)
	}
	if d := a.Check(Request{Tenant: "t", Priority: Critical}); !d.Allowed || d.Available != 1 {
		t.Errorf("the refused request took from the total: %+v; want admitted, 1 left", d)
	}
}

// TestKeyFloodBounded floods a per-IP rule with distinct addresses: the
// keys held stay at MaxKeys, and each intent's overflow is counted.
func TestKeyFloodBounded(t *testing.T) {
	for _, intent := range []lease.Intent{lease.Capacity, lease.Quota, lease.Abuse} {
		t.Run(intent.String(), func(t *testing.T) {
			clk := newManualClock()
			a, err := New(Config{Rules: []rules.Rule{rule("ip", rules.IP, algo.GCRA, 1, time.Hour, intent)}, Clock: clk, MaxKeys: 1000})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(context.Background())
			admitted := 0
			for i := 0; i < 20000; i++ {
				if a.Check(Request{IP: fmt.Sprintf("203.0.%d.%d", i/256%256, i%256) + fmt.Sprint(i/65536)}).Allowed {
					admitted++
				}
			}
			st := a.rules.Load().rules[0].def.keyed.Stats()
			if st.Keys > 1000 {
				t.Fatalf("%d keys held, MaxKeys 1000", st.Keys)
			}
			switch intent {
			case lease.Capacity:
				if st.Evicted == 0 || admitted != 20000 {
					t.Errorf("capacity: %+v admitted %d; want evictions", st, admitted)
				}
			case lease.Quota:
				if st.Untracked == 0 || admitted != 20000 {
					t.Errorf("quota: %+v admitted %d; want new keys admitted untracked", st, admitted)
				}
			case lease.Abuse:
				if st.Rejected == 0 || admitted != 1000 {
					t.Errorf("abuse: %+v admitted %d; want new keys refused", st, admitted)
				}
			}
		})
	}
}

// TestCheckAllocatesNothing: Check on keys already held allocates nothing,
// with one rule and with the four-level hierarchy.
func TestCheckAllocatesNothing(t *testing.T) {
	clk := newManualClock()
	one := standalone(t, clk, rule("user", rules.User, algo.GCRA, 1000, time.Second, lease.Capacity))
	four := standalone(t, clk, fourLevels()...)
	req := Request{Tenant: "acme", User: "u-42", Route: "/v1/search", IP: "203.0.113.9"}
	for _, a := range []*Agent{one, four} {
		a.Check(req)
		if n := testing.AllocsPerRun(1000, func() { a.Check(req) }); n != 0 {
			t.Errorf("%d rules: %v allocations per Check", a.Rules().Len(), n)
		}
	}
}

func fourLevels() []rules.Rule {
	g := rule("global", rules.Global, algo.TokenBucket, 1_000_000, time.Second, lease.Capacity)
	g.Burst = 100_000
	tq := rule("tenant", rules.Tenant, algo.SlidingWindow, 1_000_000, time.Minute, lease.Quota)
	u := rule("user", rules.User, algo.GCRA, 100_000, time.Second, lease.Capacity)
	u.Burst = 1000
	r := rule("route", rules.Route, algo.FixedWindow, 1_000_000, time.Minute, lease.Capacity)
	r.Match.Routes = []string{"/v1/*"}
	return []rules.Rule{g, tq, u, r}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Coordinators: []string{"127.0.0.1:1"}},
		{Rules: []rules.Rule{{Name: "bad"}}},
		{Rules: []rules.Rule{rule("r", rules.Tenant, algo.GCRA, 1, time.Second, lease.Quota)}, MaxKeys: -1},
		{Rules: []rules.Rule{rule("r", rules.Tenant, algo.GCRA, 1, time.Second, lease.Quota)}, ReportInterval: time.Microsecond},
	} {
		if a, err := New(cfg); err == nil {
			a.Close(context.Background())
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// TestLongAttributesStayDistinct: over-long attribute values are hashed
// into the key, so distinct long values keep distinct limits.
func TestLongAttributesStayDistinct(t *testing.T) {
	a := standalone(t, newManualClock(), rule("user", rules.User, algo.FixedWindow, 1, time.Minute, lease.Capacity))
	long := string(make([]byte, 500))
	if !a.Check(Request{Tenant: "t", User: long + "a"}).Allowed || !a.Check(Request{Tenant: "t", User: long + "b"}).Allowed {
		t.Fatal("two distinct long users share a limit")
	}
	if a.Check(Request{Tenant: "t", User: long + "a"}).Allowed {
		t.Fatal("the same long user got a second request")
	}
}
