package retry

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
)

func TestNewBudgetValidates(t *testing.T) {
	tests := []struct {
		maxTokens, ratio float64
		field            string // "" if valid
	}{
		{10, 0.1, ""},
		{0.001, 5, ""},
		{1e9, 0.001, ""},
		{0, 0.1, "maxTokens"},
		{-1, 0.1, "maxTokens"},
		{math.NaN(), 0.1, "maxTokens"},
		{math.Inf(1), 0.1, "maxTokens"},
		{2e9, 0.1, "maxTokens"},
		{0.0001, 0.1, "maxTokens"},
		{10, 0, "tokenRatio"},
		{10, -0.5, "tokenRatio"},
		{10, math.NaN(), "tokenRatio"},
		{10, math.Inf(1), "tokenRatio"},
		{10, 0.0001, "tokenRatio"},
	}
	for _, tt := range tests {
		b, err := NewBudget(tt.maxTokens, tt.ratio)
		if tt.field == "" {
			if err != nil || b == nil {
				t.Errorf("NewBudget(%v, %v) = %v; want a budget", tt.maxTokens, tt.ratio, err)
			}
			continue
		}
		var ce *ConfigError
		if b != nil || !errors.As(err, &ce) || ce.Field != tt.field || !errors.Is(err, ErrInvalidConfig) || !strings.HasPrefix(err.Error(), "retry: ") {
			t.Errorf("NewBudget(%v, %v) = %v, %v; want a ConfigError for %s", tt.maxTokens, tt.ratio, b, err, tt.field)
		}
	}
}

func TestBudgetFollowsGRPCThrottling(t *testing.T) {
	b, err := NewBudget(10, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	if b.Tokens() != 10 || !b.MayRetry() {
		t.Fatalf("a new budget has %v tokens, may retry %v; want full", b.Tokens(), b.MayRetry())
	}
	// Failures leaving 9, 8, 7, 6 tokens allow a retry; 5 is not above
	// maxTokens/2.
	for i, want := range []bool{true, true, true, true, false, false} {
		if got := b.RecordFailure(); got != want {
			t.Errorf("failure %d: may retry %v, want %v (tokens %v)", i+1, got, want, b.Tokens())
		}
	}
	if b.Tokens() != 4 {
		t.Fatalf("%v tokens, want 4", b.Tokens())
	}
	// Ten successes regain exactly one token: no rounding drift.
	for range 10 {
		b.RecordSuccess()
	}
	if b.Tokens() != 5 || b.MayRetry() {
		t.Errorf("%v tokens, may retry %v; want 5 and no", b.Tokens(), b.MayRetry())
	}
	b.RecordSuccess()
	if !b.MayRetry() {
		t.Errorf("%v tokens should allow retries", b.Tokens())
	}
}

func TestBudgetStaysWithinBounds(t *testing.T) {
	b, _ := NewBudget(3, 0.5)
	for range 100 {
		b.RecordFailure()
	}
	if b.Tokens() != 0 {
		t.Errorf("%v tokens after many failures, want 0", b.Tokens())
	}
	for range 100 {
		b.RecordSuccess()
	}
	if b.Tokens() != 3 {
		t.Errorf("%v tokens after many successes, want 3", b.Tokens())
	}
	big, _ := NewBudget(2, 50) // a ratio above maxTokens refills at once
	big.RecordFailure()
	big.RecordFailure()
	big.RecordSuccess()
	if big.Tokens() != 2 {
		t.Errorf("%v tokens, want 2", big.Tokens())
	}
}

func TestBudgetConcurrentUse(t *testing.T) {
	b, _ := NewBudget(100, 0.25)
	var wg sync.WaitGroup
	// 40 failures and 80 successes from many goroutines. No bound is
	// reached on the way down (100 − 40 > 0), and successes wait until all
	// failures are recorded, so the result is exact: 60 + 20 = 80.
	var failures sync.WaitGroup
	for range 40 {
		failures.Go(func() { b.RecordFailure() })
	}
	failures.Wait()
	for range 80 {
		wg.Go(func() {
			b.RecordSuccess()
			_ = b.MayRetry()
		})
	}
	wg.Wait()
	if b.Tokens() != 80 {
		t.Errorf("%v tokens, want 80", b.Tokens())
	}
}
