package agent

import (
	"context"
	"errors"
	"math/bits"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
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

// TestSettledReservationsLeaveTheQueue: what the agent keeps for its
// reservations is bounded by the open ones. One reservation left open (an
// LLM stream, a client that never settles) once pinned every later one,
// settled or not, in the deadline queue for the whole TTL, each with its
// rule set: 300,000 reserve+settle behind it kept 300,001 queued.
func TestSettledReservationsLeaveTheQueue(t *testing.T) {
	clk := newManualClock()
	a := standalone(t, clk, rule("tokens", rules.Tenant, algo.FixedWindow, 1<<40, time.Hour, lease.Capacity))
	_, long := a.Reserve(Request{Tenant: "llm-co", Cost: 1000})
	for i := range 20_000 {
		d, res := a.Reserve(Request{Tenant: "llm-co", Cost: 10})
		if !d.Allowed {
			t.Fatalf("reserve %d: %+v", i, d)
		}
		if _, err := a.Settle(res, 5); err != nil {
			t.Fatal(err)
		}
	}
	if open, q := a.OpenReservations(), queued(a); open != 1 || q > open {
		t.Fatalf("%d reservations queued for %d open, want no more than the open", q, open)
	}
	// The one left open still expires at its TTL.
	clk.Advance(DefaultReservationTTL + time.Second)
	a.settleDue(false)
	if _, err := a.Settle(long, 1); !errors.Is(err, ErrSettled) {
		t.Fatalf("settling the long reservation after its TTL: %v", err)
	}
	if open, q := a.OpenReservations(), queued(a); open != 0 || q != 0 {
		t.Fatalf("after the TTL: %d open, %d queued", open, q)
	}
}

// queued is how many reservations the agent's list by deadline holds.
func queued(a *Agent) int {
	a.reserved.mu.Lock()
	defer a.reserved.mu.Unlock()
	n := 0
	for r := a.reserved.oldest; r != nil; r = r.newer {
		n++
	}
	return n
}

// TestReservationIDsAreUnguessable: a reservation's number says nothing
// of the others', so that one caller of a shared sidecar cannot settle
// another's. They were a counter xor a mask: consecutive numbers differed
// by s^(s+1), 1 half the time, and a number with its low bit flipped was
// a neighbour's reservation.
func TestReservationIDsAreUnguessable(t *testing.T) {
	a := standalone(t, newManualClock(), rule("tokens", rules.Tenant, algo.FixedWindow, 1<<40, time.Hour, lease.Capacity))
	const n = 1000
	ids := make([]uint64, n)
	open := map[uint64]bool{}
	for i := range ids {
		d, res := a.Reserve(Request{Tenant: "llm-co", Cost: 10})
		if !d.Allowed || res.ID() == 0 {
			t.Fatalf("reserve %d: %+v, %v", i, d, res)
		}
		ids[i] = res.ID()
		open[ids[i]] = true
	}
	if len(open) != n {
		t.Fatalf("%d distinct numbers for %d reservations", len(open), n)
	}
	// Random 64-bit numbers differ in 32 bits on average; fewer than 8
	// happens to one pair in 10^10.
	diffs := map[uint64]bool{}
	for i := 1; i < n; i++ {
		if x := ids[i] ^ ids[i-1]; bits.OnesCount64(x) < 8 {
			t.Fatalf("reservations %d and %d: %#x and %#x differ in %d bits", i-1, i, ids[i-1], ids[i], bits.OnesCount64(x))
		}
		diffs[ids[i]-ids[i-1]] = true
	}
	if len(diffs) < n-1 {
		t.Fatalf("%d distinct differences between %d consecutive numbers", len(diffs), n)
	}
	// A caller that knows one number and guesses its neighbours, by
	// flipping its low bits or counting from it, settles nothing.
	known := ids[n/2]
	var guesses []uint64
	for k := uint64(1); k < 1024; k++ {
		guesses = append(guesses, known^k, known+k, known-k)
	}
	for _, g := range guesses {
		if open[g] {
			t.Fatalf("%#x, guessed from %#x, is an open reservation's", g, known)
		}
		if _, err := a.Settle(ReservationFromID(g), 0); !errors.Is(err, ErrNoReservation) {
			t.Fatalf("settling %#x, guessed from %#x: %v, want ErrNoReservation", g, known, err)
		}
	}
	if got := a.OpenReservations(); got != n {
		t.Fatalf("%d open after the guesses, want %d", got, n)
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
