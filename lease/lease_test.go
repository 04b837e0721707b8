package lease

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestIntents(t *testing.T) {
	tests := []struct {
		intent    Intent
		name      string
		tolerance float64
		mode      FailMode
	}{
		{Capacity, "capacity", 0.03, FailFallback},
		{Quota, "quota", 0.05, FailOpen},
		{Abuse, "abuse", 0, FailClosed},
	}
	for _, tt := range tests {
		got, err := ParseIntent(tt.name)
		if err != nil || got != tt.intent {
			t.Errorf("ParseIntent(%q) = %v, %v", tt.name, got, err)
		}
		if b, _ := tt.intent.MarshalText(); string(b) != tt.name {
			t.Errorf("%v marshals to %q", tt.intent, b)
		}
		if tt.intent.DefaultTolerance() != tt.tolerance || tt.intent.DefaultFailMode() != tt.mode {
			t.Errorf("%v defaults: %v, %v", tt.intent, tt.intent.DefaultTolerance(), tt.intent.DefaultFailMode())
		}
		var m FailMode
		if err := m.UnmarshalText([]byte(tt.mode.String())); err != nil || m != tt.mode {
			t.Errorf("fail mode %v round trip: %v, %v", tt.mode, m, err)
		}
	}
	if _, err := ParseIntent("billing"); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown intent: %v", err)
	}
	if _, err := ParseFailMode("maybe"); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown fail mode: %v", err)
	}
}

func TestFallbackShare(t *testing.T) {
	tests := []struct {
		mode      FailMode
		lastGrant float64
		nodes     int
		want      float64
	}{
		{FailFallback, 300, 4, 250}, // limit ÷ nodes last seen, whatever was held
		{FailFallback, -1, 0, 1000}, // never saw another node: the whole limit is the share
		{FailOpen, 300, 4, 300},     // keep the last lease
		{FailOpen, -1, 4, 250},      // never had one: its unleased share, not every node the whole limit
		{FailClosed, 300, 4, 0},
	}
	for _, tt := range tests {
		if got := FallbackShare(tt.mode, 1000, tt.lastGrant, tt.nodes); got != tt.want {
			t.Errorf("FallbackShare(%v, 1000, %v, %d) = %v, want %v", tt.mode, tt.lastGrant, tt.nodes, got, tt.want)
		}
	}
}

func TestUnleasedShare(t *testing.T) {
	if got := UnleasedShare(1000, 8); got != 125 {
		t.Errorf("UnleasedShare(1000, 8) = %v", got)
	}
	if got := UnleasedShare(1000, 0); got != 1000 {
		t.Errorf("UnleasedShare with no nodes known = %v, want the whole limit", got)
	}
}

func TestLeaseOrder(t *testing.T) {
	a := Lease{Epoch: 3, Seq: 10}
	for _, tt := range []struct {
		b    Lease
		want bool
	}{
		{Lease{Epoch: 3, Seq: 9}, true},
		{Lease{Epoch: 3, Seq: 10}, false},
		{Lease{Epoch: 3, Seq: 11}, false},
		{Lease{Epoch: 2, Seq: 99}, true}, // a new leader's first round beats the old leader's last
		{Lease{Epoch: 4, Seq: 1}, false},
	} {
		if got := a.Supersedes(tt.b); got != tt.want {
			t.Errorf("(%d,%d).Supersedes(%d,%d) = %v", a.Epoch, a.Seq, tt.b.Epoch, tt.b.Seq, got)
		}
	}
	exp := Lease{Expires: time.Unix(100, 0)}
	if exp.Expired(time.Unix(99, 0)) || !exp.Expired(time.Unix(100, 0)) {
		t.Error("a lease expires at its Expires instant, not before")
	}
	if got := BurstShare(1000, 500, 250); got != 125 {
		t.Errorf("BurstShare = %v, want 125", got)
	}
}

func TestEstimator(t *testing.T) {
	e := DefaultEstimator()
	sec := time.Second
	tests := []struct {
		name string
		prev float64
		obs  Observation
		want float64
	}{
		{"first interval: a move from zero", 0, Observation{Admitted: 40, Denied: 60, Interval: sec}, 100},
		{"noise inside the band is averaged", 100, Observation{Admitted: 90, Interval: sec}, 95},
		{"a rise inside the band, constrained: at least what it attempted", 100, Observation{Admitted: 50, Denied: 60, Interval: sec}, 110},
		{"a fall inside the band, constrained: averaged", 100, Observation{Admitted: 50, Denied: 30, Interval: sec}, 90},
		{"a fall beyond the band, constrained: followed at once", 300, Observation{Admitted: 50, Denied: 150, Interval: sec}, 200},
		{"a rise beyond the band: followed at once", 100, Observation{Admitted: 100, Denied: 200, Interval: sec}, 300},
		{"traffic gone: share given back at once", 500, Observation{Interval: sec}, 0},
		{"unconstrained, within the band: averaged but capped", 100, Observation{Admitted: 80, Interval: sec}, 90},
		{"rates are per period: 30 in 500ms on a 1s period", 0, Observation{Admitted: 20, Denied: 10, Interval: sec / 2}, 60},
		{"no interval: nothing learned", 7, Observation{Admitted: 100}, 7},
	}
	for _, tt := range tests {
		if got := e.Next(tt.prev, tt.obs, sec); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: Next = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPoolValidate(t *testing.T) {
	for _, p := range []Pool{
		{Limit: -1},
		{Limit: math.NaN()},
		{Limit: math.Inf(1)},
		{Limit: 10, Tolerance: -0.1},
		{Limit: 10, Tolerance: 2},
		{Limit: 10, Strategy: 9},
	} {
		if err := p.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", p, err)
		}
	}
	if err := (Pool{Limit: 10, Tolerance: 0.05}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestAllocateCorruptInput checks that NaN, infinite and negative amounts in
// claims are treated as zero rather than poisoning the round.
func TestAllocateCorruptInput(t *testing.T) {
	claims := []Claim{
		{Present: true, Demand: math.NaN(), Held: math.Inf(1)},
		{Present: true, Demand: -5, Committed: math.NaN()},
		{Present: true, Demand: 50},
	}
	Allocate(Pool{Limit: 100, Tolerance: 0.05}, claims)
	sum := 0.0
	for _, c := range claims {
		if math.IsNaN(c.Grant) || math.IsInf(c.Grant, 0) || c.Grant < 0 {
			t.Fatalf("corrupt grant %v", c.Grant)
		}
		sum += c.Grant
	}
	if sum > 105 {
		t.Fatalf("grants add up to %v", sum)
	}
}
