package agent

import (
	"context"
	"fmt"
	"github.com/allot-io/allot/internal/timeutil"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// engineFleet is a few agents and an in-process coordinator engine on one
// manual clock: every gateway gets the same checks for one tenant, and
// reports at the middle of every second (early reports as they ask).
type engineFleet struct {
	t        *testing.T
	clk      *timeutil.Manual
	rule     rules.Rule
	eng      *allocator.Engine
	gws      []*Agent
	perStep  int      // checks per gateway every 10 ms
	every    int      // steps of 10 ms between checks (0: every step)
	steps    int      // steps run so far
	tenants  []string // the checks' tenants, in turn (default: acme)
	turn     int
	admitted map[int64]int // by second (window)
	first    int64         // the first second
}

func newEngineFleet(t *testing.T, r rules.Rule, gateways, perStep int) *engineFleet {
	t.Helper()
	clk := newManualClock()
	return newEngineFleetAt(t, r, gateways, perStep, clk.Now().Truncate(time.Second)) // on a window start
}

// newEngineFleetAt is newEngineFleet with the clock starting at start.
func newEngineFleetAt(t *testing.T, r rules.Rule, gateways, perStep int, start time.Time) *engineFleet {
	t.Helper()
	clk := timeutil.NewManual(start)
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	f := &engineFleet{t: t, clk: clk, rule: r, eng: eng, perStep: perStep, admitted: map[int64]int{}, first: clk.Now().Unix()}
	for i := range gateways {
		f.gws = append(f.gws, f.start(fmt.Sprintf("gw-%d", i+1)))
	}
	for range 2 { // each registers, then hears the fleet's size
		for _, a := range f.gws {
			f.exchange(a, false)
		}
	}
	return f
}

// start starts a gateway's agent process.
func (f *engineFleet) start(id string) *Agent {
	f.t.Helper()
	return engineAgent(f.t, f.eng, f.clk, id, "eu", f.rule, nil)
}

func (f *engineFleet) exchange(a *Agent, urgent bool) {
	for x := a.prepareReport(urgent); x != nil; x = x.next {
		resp, err := f.eng.Report(f.clk.Now(), x.req)
		a.deliver(x, resp, err)
	}
}

// run advances the clock by d in 10 ms steps, checking and reporting.
func (f *engineFleet) run(d time.Duration) {
	for range d / (10 * time.Millisecond) {
		f.clk.Advance(10 * time.Millisecond)
		now := f.clk.Now()
		f.steps++
		checks := f.perStep
		if f.every > 1 && f.steps%f.every != 0 {
			checks = 0
		}
		for _, a := range f.gws {
			for range checks {
				tenant := "acme"
				if len(f.tenants) > 0 {
					tenant, f.turn = f.tenants[f.turn%len(f.tenants)], f.turn+1
				}
				if a.Check(Request{Tenant: tenant}).Allowed {
					f.admitted[now.Unix()]++
				}
			}
			if a.wantsEarlyReport() {
				f.exchange(a, true)
			}
		}
		if now.Sub(now.Truncate(time.Second)) == 500*time.Millisecond {
			for _, a := range f.gws {
				f.exchange(a, false)
			}
			f.eng.Round(now)
		}
	}
}

// TestRestartStaysWithinQuota: a gateway's process restarted in the
// middle of a second, under the same node name, while its tenant offers
// twice its quota over three gateways. The new process cannot know what
// the old one spent; it asks for a lease at its first check, and the lease
// it gets for a window is what its node has left; a bucket it starts
// empty, earning its burst. Every second, the restart's included, stays
// within the quota's 5% tolerance and at its limit. Before, the new
// process spent a fresh unleased share on top of its predecessor's (a
// rolling deploy reached 108% of a fixed window on real processes, 112%
// with 10 sidecars; issue 11).
func TestRestartStaysWithinQuota(t *testing.T) {
	for _, tt := range []struct {
		alg algo.Algorithm
		// most the restart's second may admit: the window's count is
		// exact; a token bucket's first lease can lag its rate by a unit
		// or two.
		most int
	}{
		{algo.FixedWindow, 602},
		{algo.TokenBucket, 606},
	} {
		t.Run(tt.alg.String(), func(t *testing.T) {
			f := newEngineFleet(t, rule("quota", rules.Tenant, tt.alg, 600, time.Second, lease.Quota), 3, 4)
			f.run(6300 * time.Millisecond)
			// gw-1 is restarted 300 ms into a second: it flushes what it
			// counted and leaves; its new process registers and serves at
			// once.
			restart := f.clk.Now().Unix()
			if err := f.gws[0].Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			f.gws[0] = f.start("gw-1")
			f.exchange(f.gws[0], false)
			f.run(4700 * time.Millisecond)
			for w := f.first + 3; w < f.clk.Now().Unix(); w++ {
				got := f.admitted[w]
				if got > 630 {
					t.Errorf("second %d (restart in %d) admitted %d of 600: over the quota's 5%% tolerance", w-f.first, restart-f.first, got)
				}
				if got < 597 {
					t.Errorf("second %d (restart in %d) admitted %d of 600 with twice that offered: under the quota", w-f.first, restart-f.first, got)
				}
				// The new process asks at its first check (joinReports)
				// and spends nearly nothing on its unleased share; asking
				// once half of it was spent cost the restart's window 4
				// units here, and more with more traffic.
				if w == restart && got > tt.most {
					t.Errorf("the restart's second admitted %d of 600; want at most %d", got, tt.most)
				}
			}
		})
	}
}

// TestSlidingWindowQuotaOverManyNodes: a sliding-window quota divided
// among ten gateways admits its limit when twice that is offered. Each
// node's count is a whole number under an estimate with a fractional
// part, so at the end of every window a saturated node stops one unit
// short of its part; a central counter loses that unit once, a fleet of
// ten lost ten (98.3% of a 600/s quota on real processes, issue 11).
func TestSlidingWindowQuotaOverManyNodes(t *testing.T) {
	f := newEngineFleet(t, rule("quota", rules.Tenant, algo.SlidingWindow, 600, time.Second, lease.Quota), 10, 2)
	f.run(15 * time.Second)
	sum, n := 0, 0
	for w := f.first + 5; w < f.clk.Now().Unix(); w++ {
		got := f.admitted[w]
		sum, n = sum+got, n+1
		if got > 630 {
			t.Errorf("window %d admitted %d of 600: over the quota's 5%% tolerance", w-f.first, got)
		}
	}
	if avg := float64(sum) / float64(n) / 600; avg < 0.995 {
		t.Errorf("ten gateways admitted %.1f%% of a 600/s sliding-window quota on average, with twice that offered; want at least 99.5%%", 100*avg)
	}
}

// TestGlobalCapacityColdStart: a global capacity rule (a token bucket of
// 600/s with a burst of 600) that ten gateways start enforcing at once,
// seven tenants offering over three times the limit. An exact central
// bucket admits 1,200 in the first second (its burst and its rate) and
// 600 a second after; the fleet admits no more than that, plus the
// intent's 3%, from the first division on. The first divisions granted
// the first reporters the shares the other nodes still held unreported:
// 160% of the limit for seconds on real processes, 1,253 and 1,058 here
// in the second and third seconds (issue 11).
func TestGlobalCapacityColdStart(t *testing.T) {
	f := newEngineFleet(t, rule("capacity", rules.Global, algo.TokenBucket, 600, time.Second, lease.Capacity), 10, 2)
	f.tenants = []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6"}
	f.run(8 * time.Second)
	for w := f.first; w < f.clk.Now().Unix(); w++ {
		want, low := 600.0, 0.97
		if w == f.first {
			// The burst, as a central bucket admits it; the nodes' parts
			// of it are spent at their own pace.
			want, low = 1200, 0.9
		}
		if got := float64(f.admitted[w]); got > 1.03*want || got < low*want {
			t.Errorf("second %d admitted %.0f; an exact central bucket admits %.0f (3%% tolerance)", w-f.first, got, want)
		}
	}
}

// TestJoiningHotKeysBounded: a process joining the fleet asks for leases
// at a key's first check, but not for more keys than half of MaxHotKeys:
// a gateway restarted into a flood of new keys does not fill its hot set
// with keys it saw once.
func TestJoiningHotKeysBounded(t *testing.T) {
	clk := newManualClock()
	r := rule("quota", rules.Tenant, algo.FixedWindow, 600, time.Second, lease.Quota)
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := engineAgent(t, eng, clk, "gw-1", "eu", r, func(c *Config) { c.MaxHotKeys = 20 })
	for i := range 200 {
		a.Check(Request{Tenant: fmt.Sprintf("t%d", i)})
		if a.wantsEarlyReport() || i%10 == 9 {
			for x := a.prepareReport(true); x != nil; x = x.next {
				resp, err := eng.Report(clk.Now(), x.req)
				a.deliver(x, resp, err)
			}
		}
		clk.Advance(time.Millisecond)
	}
	if hot := len(*a.rules.Load().rules[0].hot.Load()); hot == 0 || hot > 10+1 {
		t.Errorf("a joining agent made %d of 200 keys seen once hot; want some, and no more than half of MaxHotKeys (10)", hot)
	}
}
