package agent

import (
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// TestIdleLeasedKeysLeave: a tenant's key leased under a coordinated rule,
// then idle, gives its lease up and leaves the hot keys, so that a
// sidecar's memory and reports do not grow with every tenant it ever
// served; a window rule's key waits until a whole period has passed since
// it last counted. Traffic that returns makes the key hot again.
func TestIdleLeasedKeysLeave(t *testing.T) {
	for _, tc := range []struct {
		name string
		alg  algo.Algorithm
		// idle is how long the tenants stay idle before the keys must be
		// gone; period is the rule's.
		period, idle time.Duration
		// at90 is how many keys are still hot after 90 s idle.
		at90 int
	}{
		{"gcra", algo.GCRA, time.Second, 100 * time.Second, 0},
		{"fixed window of 5 minutes", algo.FixedWindow, 5 * time.Minute, 5*time.Minute + 10*time.Second, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newManualClock()
			r := rule("api", rules.Tenant, tc.alg, 100, tc.period, lease.Capacity)
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
			tenants := []string{"t1", "t2", "t3"}
			// Busy for 5 s: every tenant's key turns hot and is leased.
			for range 5 {
				for range 50 {
					for _, tn := range tenants {
						a.Check(Request{Tenant: tn})
					}
					clk.Advance(20 * time.Millisecond)
				}
				report()
			}
			hot := func() int { return len(*a.rules.Load().rules[0].hot.Load()) }
			leased := 0
			for _, hk := range *a.rules.Load().rules[0].hot.Load() {
				if hk.leased.Load() {
					leased++
				}
			}
			if hot() != 3 || leased != 3 {
				t.Fatalf("after the busy spell: %d hot keys, %d leased; want 3 and 3", hot(), leased)
			}
			// Idle: reported every second, the keys stay until the
			// bound, then leave.
			var at30, at90 int
			for d := time.Second; d <= tc.idle; d += time.Second {
				clk.Advance(time.Second)
				report()
				switch d {
				case 30 * time.Second:
					at30 = hot()
				case 90 * time.Second:
					at90 = hot()
				}
			}
			if at30 != 3 || at90 != tc.at90 {
				t.Fatalf("hot keys after 30 s idle: %d, want 3; after 90 s: %d, want %d", at30, at90, tc.at90)
			}
			if n := hot(); n != 0 {
				t.Fatalf("after %v idle, %d hot keys are left; want 0", tc.idle, n)
			}
			if req := a.prepareReport(false).req; len(req.GetDemand()) != 0 {
				t.Fatalf("the next report still carries %d keys", len(req.GetDemand()))
			}
			// Traffic returns: the key is hot again.
			for range 3 {
				for range 50 {
					a.Check(Request{Tenant: "t1"})
					clk.Advance(20 * time.Millisecond)
				}
				report()
			}
			if hot() != 1 {
				t.Fatalf("t1 busy again: %d hot keys, want 1", hot())
			}
		})
	}
}

// TestIdleClassesLeave: a global rule's classes (a tenant at a priority)
// idle for long enough leave too, their leases given up, so that a node
// serving ever new tenants keeps only the busy ones.
func TestIdleClassesLeave(t *testing.T) {
	clk := newManualClock()
	r := rule("capacity", rules.Global, algo.GCRA, 100, time.Second, lease.Capacity)
	r.Burst = 20
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
	classes := func() int { return len(*a.rules.Load().rules[0].fair.classes.Load()) }
	for range 5 {
		for range 50 {
			for _, tn := range []string{"t1", "t2"} {
				a.Check(Request{Tenant: tn})
			}
			clk.Advance(20 * time.Millisecond)
		}
		report()
	}
	if classes() != 2 {
		t.Fatalf("%d classes after the busy spell, want 2", classes())
	}
	for range 30 {
		clk.Advance(time.Second)
		report()
	}
	if classes() != 2 {
		t.Fatalf("%d classes after 30 s idle, want 2 still", classes())
	}
	for range 40 {
		clk.Advance(time.Second)
		report()
	}
	if classes() != 0 {
		t.Fatalf("%d classes after 70 s idle, want 0", classes())
	}
	for range 3 {
		for range 50 {
			a.Check(Request{Tenant: "t1"})
			clk.Advance(20 * time.Millisecond)
		}
		report()
	}
	if classes() != 1 {
		t.Fatalf("t1 busy again: %d classes, want 1", classes())
	}
}

// TestUndoneCostNeverReportedNegative: a cost given back to a key after a
// report took it (a later rule refused the check) is carried to the next
// report, never reported as negative demand, which the coordinators refuse.
func TestUndoneCostNeverReportedNegative(t *testing.T) {
	clk := newManualClock()
	r := rule("api", rules.Tenant, algo.GCRA, 100, time.Second, lease.Capacity)
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := engineAgent(t, eng, clk, "gw-1", "eu-west", r, nil)
	for range 3 {
		for range 50 {
			a.Check(Request{Tenant: "t1"})
			clk.Advance(20 * time.Millisecond)
		}
		x := a.prepareReport(false)
		resp, err := eng.Report(clk.Now(), x.req)
		a.deliver(x, resp, err)
	}
	var hk *hotKey
	for _, k := range *a.rules.Load().rules[0].hot.Load() {
		hk = k
	}
	if hk == nil {
		t.Fatal("no hot key")
	}
	hk.admitted.Store(-10) // a cost given back after the last report took it
	for i, want := range []float64{0, 15} {
		if i == 1 {
			hk.admitted.Add(25)
		}
		x := a.prepareReport(false)
		d := x.req.GetDemand()
		if len(d) != 1 || d[0].GetAdmitted() != want {
			t.Fatalf("report %d: demand %v, want admitted %v", i, d, want)
		}
		if i == 1 && hk.admitted.Load() != 0 {
			t.Fatalf("report %d left %d in the counter", i, hk.admitted.Load())
		}
		resp, err := eng.Report(clk.Now(), x.req)
		a.deliver(x, resp, err)
		clk.Advance(time.Second)
	}
}
