package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/internal/timeutil"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// skewedEngine is an Engine whose clock runs ahead of the agent's by a
// skew the test can step.
type skewedEngine struct {
	e    *allocator.Engine
	clk  *timeutil.Manual
	skew atomic.Int64
}

func (s *skewedEngine) now() time.Time { return s.clk.Now().Add(time.Duration(s.skew.Load())) }

func (s *skewedEngine) Report(_ context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	return s.e.Report(s.now(), req)
}

// TestOffsetStep: when the estimate of the coordinators' clock steps
// (here by a minute), rate algorithms refill by the local monotonic clock
// and gain nothing from the step, while window algorithms follow the
// coordinators' clock, so every node agrees which window a request is in.
func TestOffsetStep(t *testing.T) {
	for _, tc := range []struct {
		name      string
		alg       algo.Algorithm
		burst     int64
		wantAfter int // admitted right after the step, of 20 tries
	}{
		// Drained, the bucket refills 10/s: a minute's step must not hand
		// out its burst of 10 at once.
		{"token bucket", algo.TokenBucket, 10, 0},
		// The minute's window is spent; the coordinators' clock is a
		// minute on: the next window has begun, with its 10.
		{"fixed window", algo.FixedWindow, 0, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newManualClock()
			period := time.Second
			limit := int64(10)
			if tc.alg == algo.FixedWindow {
				period, limit = time.Minute, 10
			}
			r := rule("api", rules.Tenant, tc.alg, limit, period, lease.Capacity)
			r.Burst = tc.burst
			eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
			if err != nil {
				t.Fatal(err)
			}
			se := &skewedEngine{e: eng, clk: clk}
			a, err := New(Config{NodeID: "gw-1", Region: "eu-west", Rules: []rules.Rule{r}, Clock: clk, ReportInterval: time.Second, Transport: byHand{se}})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(context.Background())
			report := func() {
				x := a.prepareReport(false)
				resp, err := se.Report(context.Background(), x.req)
				a.deliver(x, resp, err)
			}
			report()
			// Spend everything there is, without letting time pass.
			for range 100 {
				a.Check(Request{Tenant: "acme"})
			}
			if d := a.Check(Request{Tenant: "acme"}); d.Allowed {
				t.Fatalf("still admitting after 100 checks: %+v", d)
			}
			// The coordinators' clock steps a minute ahead; the next
			// answer tells the agent.
			se.skew.Store(int64(time.Minute))
			clk.Advance(time.Millisecond)
			report()
			if off := time.Duration(a.clock.offset.Load()); off < 59*time.Second {
				t.Fatalf("offset %v after the step, want about a minute", off)
			}
			got := 0
			for range 20 {
				if a.Check(Request{Tenant: "acme"}).Allowed {
					got++
				}
			}
			if got != tc.wantAfter {
				t.Fatalf("admitted %d of 20 right after the step, want %d", got, tc.wantAfter)
			}
		})
	}
}
