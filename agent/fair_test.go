package agent

import (
	"context"
	"github.com/allot-io/allot/internal/timeutil"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// engineTransport carries reports to an in-process allocator.Engine at
// the test clock's time.
type engineTransport struct {
	e   *allocator.Engine
	clk *timeutil.Manual
}

func (t engineTransport) Report(_ context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	return t.e.Report(t.clk.Now(), req)
}

// engineAgent starts an agent that reports by hand to eng at clk's time,
// with r as its rule, a 1 s interval, and whatever tweak changes.
func engineAgent(t *testing.T, eng *allocator.Engine, clk *timeutil.Manual, id, region string, r rules.Rule, tweak func(*Config)) *Agent {
	t.Helper()
	cfg := Config{NodeID: id, Region: region, Rules: []rules.Rule{r}, Clock: clk, ReportInterval: time.Second,
		Transport: byHand{engineTransport{eng, clk}}}
	if tweak != nil {
		tweak(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

// TestGlobalRuleLendsIdleShare: weighted max-min fairness is work-
// conserving. When one tenant of a global rule stops, the capacity its
// class lease leaves idle on the node goes to the tenant that wants more
// at once, without waiting for the coordinator to re-divide it; and the
// node's total still holds.
func TestGlobalRuleLendsIdleShare(t *testing.T) {
	clk := newManualClock()
	r := rule("capacity", rules.Global, algo.GCRA, 100, time.Second, lease.Capacity)
	r.Burst = 20 // lending needs a burst: see minBorrowLimit
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := engineAgent(t, eng, clk, "gw-1", "eu-west", r, nil)
	report := func() {
		x := a.prepareReport(false)
		resp, err := eng.Report(clk.Now(), x.req)
		a.deliver(x, resp, err)
		eng.Round(clk.Now())
	}
	big, small := Request{Tenant: "big"}, Request{Tenant: "small"}
	// run offers big 150/s and small 30/s (when on) for d, in 10 ms steps,
	// reporting every second, and returns what each got.
	run := func(d time.Duration, smallOn bool) (gotBig, gotSmall int) {
		for step := time.Duration(0); step < d; step += 10 * time.Millisecond {
			clk.Advance(10 * time.Millisecond)
			for range 3 {
				if a.Check(big).Allowed {
					gotBig++
				}
			}
			if smallOn && step%(30*time.Millisecond) == 0 && a.Check(small).Allowed {
				gotSmall++
			}
			if (step+10*time.Millisecond)%time.Second == 0 {
				report()
			}
		}
		return gotBig, gotSmall
	}
	run(5*time.Second, true) // leases settle: small about its demand, big the rest
	gotBig, gotSmall := run(3*time.Second, true)
	if gotSmall < 85 || gotBig+gotSmall > 315 {
		t.Fatalf("with both busy: big %d, small %d in 3 s; want small served and the total within 100/s", gotBig, gotSmall)
	}
	// small stops just after a report: big's class lease is still its
	// share, but the node's total has room, and big may use it at once.
	gotBig, _ = run(time.Second, false)
	if gotBig < 95 {
		t.Fatalf("big got %d in the second after small stopped; want the node's whole 100", gotBig)
	}
	if gotBig > 103+5 {
		t.Fatalf("big got %d in a second; the node's total is 100", gotBig)
	}
}

// TestGlobalRuleWithoutBurst: a GCRA rule with no burst admits one unit at
// a time; priority reserves round down to nothing rather than refusing
// every request.
func TestGlobalRuleWithoutBurst(t *testing.T) {
	clk := newManualClock()
	a := standalone(t, clk, rule("capacity", rules.Global, algo.GCRA, 100, time.Second, lease.Capacity))
	got := 0
	for range 200 {
		clk.Advance(5 * time.Millisecond)
		for _, p := range []Priority{Interactive, Batch} {
			if a.Check(Request{Tenant: "t", Priority: p}).Allowed {
				got++
			}
		}
	}
	if got < 95 || got > 101 {
		t.Fatalf("admitted %d in one second under a 100/s rule", got)
	}
}

// TestLocalRuleWholeLimit: a local rule is never coordinated, so every
// node enforces its whole limit, however many nodes the cluster knows of
// when the rule arrives.
func TestLocalRuleWholeLimit(t *testing.T) {
	clk := newManualClock()
	local := rule("per-node", rules.Tenant, algo.FixedWindow, 10, time.Minute, lease.Capacity)
	local.Local = true
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west"}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	var agents []*Agent
	join := func(id string) {
		a, err := New(Config{NodeID: id, Region: "eu-west", Clock: clk, Transport: byHand{engineTransport{eng, clk}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close(context.Background()) })
		agents = append(agents, a)
		for _, a := range agents {
			x := a.prepareReport(false)
			resp, err := eng.Report(clk.Now(), x.req)
			a.deliver(x, resp, err)
		}
	}
	join("gw-1")
	join("gw-2")
	join("gw-3")
	// The rule arrives once the cluster knows three nodes.
	if err := eng.SetRules([]rules.Rule{local}); err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		x := a.prepareReport(false)
		resp, err := eng.Report(clk.Now(), x.req)
		a.deliver(x, resp, err)
	}
	got := 0
	for range 20 {
		if agents[2].Check(Request{Tenant: "acme"}).Allowed {
			got++
		}
	}
	if got != 10 {
		t.Fatalf("a local rule of 10 admitted %d on one of three nodes; want the whole 10", got)
	}
}

// TestRegionWithoutShare: a rule dividing its limit among regions that do
// not include the node's is refused with an error that says so.
func TestRegionWithoutShare(t *testing.T) {
	r := rule("quota", rules.Tenant, algo.TokenBucket, 100, time.Second, lease.Quota)
	r.Regions = map[string]float64{"us-east": 0.6, "ap-south": 0.4}
	_, err := New(Config{NodeID: "gw-1", Region: "eu-west", Rules: []rules.Rule{r}})
	if err == nil || !strings.Contains(err.Error(), `region "eu-west" has no share`) {
		t.Fatalf("New = %v; want an error naming the region", err)
	}
}

// TestGlobalRuleClassOfBoundedTenant: a tenant whose name reports carry in
// its bounded form (not valid UTF-8 here, so bounded to far fewer than 256
// bytes) still gets its class's lease. The lookup once assumed a bounded
// name is 256 bytes long and dropped such leases.
func TestGlobalRuleClassOfBoundedTenant(t *testing.T) {
	clk := newManualClock()
	r := rule("capacity", rules.Global, algo.GCRA, 100, time.Second, lease.Capacity)
	r.Burst = 20
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := engineAgent(t, eng, clk, "gw-1", "eu-west", r, nil)
	req := Request{Tenant: "\xff"}
	for range 5 {
		for range 50 {
			clk.Advance(20 * time.Millisecond)
			a.Check(req)
		}
		x := a.prepareReport(false)
		resp, err := eng.Report(clk.Now(), x.req)
		a.deliver(x, resp, err)
		eng.Round(clk.Now())
	}
	rs := a.rules.Load().rules[0]
	hk := (*rs.fair.classes.Load())[classKey{a.hasher.String(req.Tenant), classPriority(rs, &req)}]
	if hk == nil || !hk.leased.Load() {
		t.Fatalf("the class of a tenant reported as %q holds no lease", allotpb.BoundName(req.Tenant))
	}
}

// TestGlobalRuleReserveWhileSaturated: a saturated global rule keeps its
// priority reserves. Once interactive requests meet the reserve they are
// refused, with a Retry-After saying when the total is past it again,
// while critical ones still take the reserve; at that time interactive
// requests are admitted again. The striped total admits, over the test,
// no more than its capacity and what it earned.
func TestGlobalRuleReserveWhileSaturated(t *testing.T) {
	clk := newManualClock()
	r := rule("capacity", rules.Global, algo.TokenBucket, 1000, time.Second, lease.Capacity)
	r.Burst = 1000
	a, err := New(Config{Rules: []rules.Rule{r}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	admitted := 0
	var refusal Decision
	for range 2000 {
		d := a.Check(Request{Tenant: "acme"})
		if !d.Allowed {
			refusal = d
			break
		}
		admitted++
	}
	// Interactive requests may not take the last 5%; stripes may hold up
	// to the rule's tolerance (3%) beyond the total.
	if admitted < 940 || admitted > 960+30 {
		t.Fatalf("interactive admitted %d of 1000 before the reserve, want about 950", admitted)
	}
	if refusal.RetryAfter <= 0 || refusal.Rule != "capacity" {
		t.Fatalf("refusal: %+v", refusal)
	}
	for i := range 10 {
		if d := a.Check(Request{Tenant: "acme"}); d.Allowed {
			t.Fatalf("interactive request %d admitted inside the reserve: %+v after %+v (%d admitted)", i, d, refusal, admitted)
		}
		if d := a.Check(Request{Tenant: "acme", Priority: Critical}); !d.Allowed {
			t.Fatalf("critical request %d refused while the reserve lasts: %+v", i, d)
		}
	}
	clk.Advance(refusal.RetryAfter + 20*time.Millisecond)
	if d := a.Check(Request{Tenant: "acme"}); !d.Allowed {
		t.Fatalf("interactive refused after its Retry-After, and the critical ones' refill: %+v", d)
	}
}
