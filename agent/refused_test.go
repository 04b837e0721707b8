package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// gathered is the value of a metric's series for a rule.
func gathered(t *testing.T, reg *prometheus.Registry, name, rule string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "rule" && l.GetValue() == rule {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{rule=%q}", name, rule)
	return 0
}

// A share of 2³² asks the algorithm for one more than the most a sliding
// window counts (its counts are 32-bit), which it refuses.
const refusedShare = 1 << 32

// TestRefusedShareIsKept: a share the algorithm refuses is not taken: the
// store keeps enforcing, and reporting, the share it had, and the refusal
// is counted and logged. Before, the store recorded the new share and
// went on enforcing the old one, silently.
func TestRefusedShareIsKept(t *testing.T) {
	reg := prometheus.NewRegistry()
	clk := newManualClock()
	r := rule("api", rules.Tenant, algo.SlidingWindow, 1000, time.Minute, lease.Capacity)
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	a := engineAgent(t, eng, clk, "gw-1", "eu-west", r, func(c *Config) {
		c.Registerer = reg
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: &logged, Level: hclog.Info})
	})
	rs := a.rules.Load().rules[0]
	st := rs.def
	before := st.share
	st.setShare(rs, refusedShare, clk.Now())
	if st.share != before {
		t.Fatalf("the store took a share the algorithm refused: %v, was %v", st.share, before)
	}
	if n := rs.reconfigErrs.Load(); n != 1 {
		t.Fatalf("%d refusals counted, want 1", n)
	}
	if got := gathered(t, reg, "allot_agent_refused_limits_total", "api"); got != 1 {
		t.Fatalf("allot_agent_refused_limits_total{rule=api} = %v, want 1", got)
	}
	rs.logRefused(a, clk.Now().UnixNano())
	if !strings.Contains(logged.String(), "refused a limit") || !strings.Contains(logged.String(), "rule=api") {
		t.Fatalf("the refusal was not logged: %q", logged.String())
	}
	// A share it takes is still taken.
	st.setShare(rs, 10, clk.Now())
	if st.share != 10 {
		t.Fatalf("share %v after a valid change, want 10", st.share)
	}
}

// TestRefusedLeaseIsKept: a lease whose limit the algorithm refuses is not
// taken: the key keeps enforcing and reporting the lease it holds.
func TestRefusedLeaseIsKept(t *testing.T) {
	clk := newManualClock()
	r := rule("api", rules.Tenant, algo.SlidingWindow, 1000, time.Minute, lease.Capacity)
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := engineAgent(t, eng, clk, "gw-1", "eu-west", r, nil)
	for range 3 {
		for range 100 {
			a.Check(Request{Tenant: "t1"})
			clk.Advance(10 * time.Millisecond)
		}
		x := a.prepareReport(false)
		resp, err := eng.Report(clk.Now(), x.req)
		a.deliver(x, resp, err)
	}
	rs := a.rules.Load().rules[0]
	var hk *hotKey
	for _, k := range *rs.hot.Load() {
		hk = k
	}
	if hk == nil || !hk.leased.Load() {
		t.Fatal("no leased hot key")
	}
	held, seq := hk.held, hk.seq
	hk.applyLease(rs, lease.Lease{Limit: refusedShare, Epoch: hk.epoch, Seq: hk.seq + 1, Expires: clk.Now().Add(time.Minute)}, false, clk.Now())
	if hk.held != held || hk.seq != seq || hk.leaseLimit() != held {
		t.Fatalf("the key took a lease the algorithm refused: held %v seq %d shown %v, was %v seq %d", hk.held, hk.seq, hk.leaseLimit(), held, seq)
	}
	if n := rs.reconfigErrs.Load(); n != 1 {
		t.Fatalf("%d refusals counted, want 1", n)
	}
	if d := a.prepareReport(false).req.GetDemand(); len(d) != 1 || d[0].GetHeld() != held || d[0].GetHeldSeq() != seq {
		t.Fatalf("the next report says the key holds %v", d)
	}
}

// tinyShare is a lease seen in a healthy demo run: the hand-over guard
// scaled a node's increase by the room the other nodes' leases left, a
// float rounding residue (2 ulps of 50), rather than none.
const tinyShare = 1.4210854715202004e-14

// TestTinyShareIsEnforceable: every positive share of every rate and
// window algorithm, however fine, is a configuration the algorithm takes,
// whatever its burst: shares too fine for the longest period algo takes
// (a century) are enforced as the finest it takes. A GCRA lease of
// 1.42e-14/s was refused ("Burst: 1 takes longer than 876000h0m0s to
// drain"), the key kept its old lease and the agent logged an ERROR.
func TestTinyShareIsEnforceable(t *testing.T) {
	for _, alg := range []algo.Algorithm{algo.GCRA, algo.TokenBucket, algo.FixedWindow, algo.SlidingWindow, algo.SlidingLog} {
		for _, period := range []time.Duration{time.Millisecond, time.Second, time.Hour, 24 * 365 * time.Hour} {
			r := rule("api", rules.Tenant, alg, 50, period, lease.Abuse)
			for _, share := range []float64{tinyShare, 1e-6, 1e-300, 5e-324, 0.3, 1, 50} {
				for _, burst := range []float64{0, tinyShare, 10 * share / 50, 1, 10, 1e6} {
					if alg.Windowed() && burst != 0 {
						continue
					}
					cfg, ok := nodeConfig(&r, share, burst, true)
					if !ok {
						t.Errorf("%s per %v: no configuration for a share of %g", alg, period, share)
						continue
					}
					if _, err := algo.New(cfg); err != nil {
						t.Errorf("%s per %v, share %g, burst %g: %+v refused: %v", alg, period, share, burst, cfg, err)
					}
				}
			}
		}
	}
}

// TestTinyLeaseIsTaken: a GCRA key given a lease of 1.42e-14/s takes it,
// refusing nothing and logging nothing, and admits at most one request
// on it.
func TestTinyLeaseIsTaken(t *testing.T) {
	clk := newManualClock()
	r := rule("per-user", rules.User, algo.GCRA, 50, time.Second, lease.Abuse)
	r.Burst = 10
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := engineAgent(t, eng, clk, "gw-1", "eu-west", r, nil)
	for range 3 {
		for range 20 {
			a.Check(Request{Tenant: "t1", User: "u1"})
			clk.Advance(50 * time.Millisecond)
		}
		x := a.prepareReport(false)
		resp, err := eng.Report(clk.Now(), x.req)
		a.deliver(x, resp, err)
	}
	rs := a.rules.Load().rules[0]
	var hk *hotKey
	for _, k := range *rs.hot.Load() {
		hk = k
	}
	if hk == nil || !hk.leased.Load() {
		t.Fatal("no leased hot key")
	}
	clk.Advance(time.Second) // whatever the old lease had saved up
	hk.applyLease(rs, lease.Lease{Limit: tinyShare, Burst: 10 * tinyShare / 50, Epoch: hk.epoch, Seq: hk.seq + 1, Expires: clk.Now().Add(time.Minute)}, false, clk.Now())
	if n := rs.reconfigErrs.Load(); n != 0 {
		t.Fatalf("%d refusals: %s", n, *rs.lastReconfigErr.Load())
	}
	if hk.leaseLimit() != tinyShare {
		t.Fatalf("the key holds %v, want the lease of %v", hk.leaseLimit(), tinyShare)
	}
	admitted := 0
	for range 100 {
		if a.Check(Request{Tenant: "t1", User: "u1"}).Allowed {
			admitted++
		}
		clk.Advance(10 * time.Millisecond)
	}
	if admitted > 1 {
		t.Errorf("%d admitted in a second on a lease of %g/s, want at most 1", admitted, tinyShare)
	}
}

// TestStaleClockCatchesUpOnRefusal: a check about to be refused on a
// coarse clock that has fallen behind (its refresher not run, as on a
// loaded machine) decides again on the current time. An agent whose
// reports are driven by hand starts no refresher, so its coarse clock
// stands still: the bucket emptied before a pause of 300 ms refills by 30
// units on the system's clock, and those are admitted; on the stale clock
// none were.
func TestStaleClockCatchesUpOnRefusal(t *testing.T) {
	clk := newManualClock()
	r := rule("plan-quota", rules.Tenant, algo.TokenBucket, 100, time.Second, lease.Quota)
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := engineAgent(t, eng, clk, "gw-1", "eu-west", r, func(c *Config) {
		// The system's clock, whose waits on close are real: nothing
		// reports here, so there is nothing to wait for.
		c.Clock, c.CloseTimeout = nil, 100*time.Millisecond
	})
	req := Request{Tenant: "acme"}
	for i := 0; a.Check(req).Allowed; i++ {
		if i > 200 {
			t.Fatal("a bucket of 100 never refused")
		}
	}
	start := time.Now()
	time.Sleep(300 * time.Millisecond)
	admitted := 0
	for range 200 {
		if a.Check(req).Allowed {
			admitted++
		}
	}
	refilled := 100 * time.Since(start).Seconds()
	if admitted < 29 || float64(admitted) > refilled+2 {
		t.Fatalf("%d admitted after %v; the bucket refilled %.0f on the system's clock", admitted, time.Since(start), refilled)
	}
}
