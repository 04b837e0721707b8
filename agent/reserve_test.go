package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/lease/rules"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func remaining(a *Agent, tenant string) int64 {
	return a.Check(Request{Tenant: tenant, Peek: true}).Remaining
}

// TestSettleChargesTheDifference: a reservation settled above its
// estimate charges the difference, below it gives it back, at 0 gives it
// all back; a token bucket settled far above goes into debt and refuses
// until repaid; a fixed window charges the window it was admitted in.
func TestSettleChargesTheDifference(t *testing.T) {
	for _, tc := range []struct {
		name       string
		alg        algo.Algorithm
		estimate   int64
		actual     int64
		wantLeft   int64 // remaining of 100 after settling
		wantDebtor bool  // a request of 1 is refused after settling
	}{
		{"above", algo.TokenBucket, 10, 40, 60, false},
		{"below", algo.TokenBucket, 40, 10, 90, false},
		{"zero", algo.TokenBucket, 40, 0, 100, false},
		{"debt", algo.TokenBucket, 100, 300, 0, true},
		{"window above", algo.FixedWindow, 10, 40, 60, false},
		{"window below", algo.FixedWindow, 40, 10, 90, false},
		{"window debt", algo.FixedWindow, 100, 300, 0, true},
		{"gcra", algo.GCRA, 10, 40, 60, false},
		{"sliding window", algo.SlidingWindow, 10, 40, 60, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newManualClock()
			r := rule("plan-quota", rules.Tenant, tc.alg, 100, time.Hour, lease.Quota)
			if tc.alg == algo.GCRA || tc.alg == algo.TokenBucket {
				r.Burst = 100
			}
			a := standalone(t, clk, r)
			d, res := a.Reserve(Request{Tenant: "acme", Cost: tc.estimate})
			if !d.Allowed || res.ID() == 0 {
				t.Fatalf("reserve: %+v, %v", d, res)
			}
			clk.Advance(time.Second)
			s, err := a.Settle(res, tc.actual)
			if err != nil || s.Charged != tc.actual-tc.estimate {
				t.Fatalf("settle: %+v, %v", s, err)
			}
			if got := remaining(a, "acme"); got != tc.wantLeft {
				t.Errorf("remaining %d after settling %d of an estimate of %d, want %d", got, tc.actual, tc.estimate, tc.wantLeft)
			}
			if got := a.Check(Request{Tenant: "acme", Peek: true}).Allowed; got == tc.wantDebtor {
				t.Errorf("a request of 1 allowed = %v after settling, want %v", got, !tc.wantDebtor)
			}
		})
	}
}

// TestSettleRefusesBadInput: each bad settle is a clear error, and
// changes nothing.
func TestSettleRefusesBadInput(t *testing.T) {
	clk := newManualClock()
	a := standalone(t, clk, rule("plan-quota", rules.Tenant, algo.FixedWindow, 100, time.Hour, lease.Quota))
	_, res := a.Reserve(Request{Tenant: "acme", Cost: 10})
	if _, err := a.Settle(res, MaxCost+1); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("a cost over MaxCost: %v", err)
	}
	if _, err := a.Settle(res, -1); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("a negative cost: %v", err)
	}
	if a.OpenReservations() != 1 || remaining(a, "acme") != 90 {
		t.Fatalf("a refused settle changed something: %d open, %d left", a.OpenReservations(), remaining(a, "acme"))
	}
	if _, err := a.Settle(res, 20); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Settle(res, 20); !errors.Is(err, ErrSettled) {
		t.Fatalf("a second settle: %v", err)
	}
	if _, err := a.Settle(ReservationFromID(12345), 1); !errors.Is(err, ErrNoReservation) {
		t.Fatalf("an unknown reservation: %v", err)
	}
	if remaining(a, "acme") != 80 {
		t.Fatalf("%d left, want 80", remaining(a, "acme"))
	}
	// A refused request reserves nothing.
	if d, res := a.Reserve(Request{Tenant: "acme", Cost: 1000}); d.Allowed || res.ID() != 0 {
		t.Fatalf("a refused reserve: %+v, %v", d, res)
	}
}

// TestReservationExpiresAtItsEstimate: a reservation not settled within
// its TTL is settled at its estimate; settling it then says so.
func TestReservationExpiresAtItsEstimate(t *testing.T) {
	clk := newManualClock()
	a, err := New(Config{Rules: []rules.Rule{rule("plan-quota", rules.Tenant, algo.FixedWindow, 100, time.Hour, lease.Quota)}, Clock: clk, ReservationTTL: time.Minute, MaxReservations: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	_, first := a.Reserve(Request{Tenant: "acme", Cost: 10})
	clk.Advance(2 * time.Minute)
	_, second := a.Reserve(Request{Tenant: "acme", Cost: 10})
	if _, err := a.Settle(first, 50); !errors.Is(err, ErrSettled) {
		t.Fatalf("settling an expired reservation: %v", err)
	}
	// Past MaxReservations the oldest is settled at its estimate.
	a.Reserve(Request{Tenant: "acme", Cost: 1})
	a.Reserve(Request{Tenant: "acme", Cost: 1})
	if _, err := a.Settle(second, 50); !errors.Is(err, ErrSettled) {
		t.Fatalf("settling a reservation pushed out: %v", err)
	}
	if n := a.OpenReservations(); n != 2 {
		t.Fatalf("%d open, want 2", n)
	}
	if got := remaining(a, "acme"); got != 78 {
		t.Fatalf("%d left, want 78 (10 + 10 + 1 + 1 spent)", got)
	}
}

// TestSettleBillsTheSettledCost: the ledger bills each reservation's
// settled cost once, and an open one's estimate when the agent closes.
func TestSettleBillsTheSettledCost(t *testing.T) {
	cs := coordinators(t, 1)
	putRules(t, cs[0].GRPCAddr(), rule("tokens", rules.Tenant, algo.TokenBucket, 1_000_000, time.Hour, lease.Quota))
	a := newAgent(t, "gw-1", addrs(cs), nil)
	// A process still joining the fleet credits a key it makes hot only
	// what its share earned since it started (startHot): 278 units a
	// second of this rule, so a key made hot in the first two seconds
	// refused a reserve of 500 (2 runs in 40). That guard is
	// TestRestartStaysWithinQuota's; this test is about the bill.
	testwait.For(t, 10*time.Second, "the agent to have joined", func() bool { return !a.joining.Load() })
	var want uint64
	for i := range 10 {
		d, res := a.Reserve(Request{Tenant: "llm-co", Cost: 500})
		if !d.Allowed {
			t.Fatalf("reserve %d: %+v", i, d)
		}
		actual := int64(100 * (i + 1))
		if _, err := a.Settle(res, actual); err != nil {
			t.Fatal(err)
		}
		want += uint64(actual)
	}
	a.Reserve(Request{Tenant: "llm-co", Cost: 777}) // never settled
	want += 777
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cc, _ := grpc.NewClient(cs[0].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer cc.Close()
	resp, err := allotpb.NewUsageServiceClient(cc).QueryUsage(ctx, &allotpb.UsageQuery{Tenant: "llm-co", Rule: "tokens", From: timestamppb.New(time.Now().Add(-2 * time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, r := range resp.GetRecords() {
		total += r.GetAdmitted()
	}
	if total != want {
		t.Errorf("the ledger bills %d units, the settled costs add up to %d", total, want)
	}
}

// TestReserveAllocations: Check is unchanged by reservations: a check
// allocates nothing still.
func TestCheckAllocatesNothingBesideReservations(t *testing.T) {
	a := standalone(t, nil, rule("plan-quota", rules.Tenant, algo.FixedWindow, 1<<40, time.Hour, lease.Capacity))
	a.Reserve(Request{Tenant: "acme", Cost: 1})
	req := Request{Tenant: "acme"}
	if n := testing.AllocsPerRun(1000, func() { a.Check(req) }); n != 0 {
		t.Fatalf("Check allocates %v per call", n)
	}
}

// BenchmarkReserveSettle: a reserve and its settle, against a check of
// the same request, every one admitted.
func BenchmarkReserveSettle(b *testing.B) {
	a := standalone(b, nil, rule("tokens", rules.Tenant, algo.FixedWindow, 1<<40, time.Hour, lease.Capacity))
	req := Request{Tenant: "llm-co", Cost: 100}
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !a.Check(req).Allowed {
				b.Fatal("refused")
			}
		}
	})
	b.Run("reserve+settle", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d, res := a.Reserve(req)
			if !d.Allowed {
				b.Fatal("refused")
			}
			if _, err := a.Settle(res, 150); err != nil {
				b.Fatal(err)
			}
		}
	})
}
