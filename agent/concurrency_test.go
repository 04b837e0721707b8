package agent

import (
	"context"
	"testing"
	"time"
)

func TestConcurrency(t *testing.T) {
	c, err := NewConcurrency(ConcurrencyConfig{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := c.TryAcquire()
	p2, _ := c.TryAcquire()
	if _, ok := c.TryAcquire(); ok {
		t.Fatal("a third request got in")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(ctx); err == nil {
		t.Fatal("Acquire did not wait for its context")
	}
	p1.Release(false)
	p3, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p2.Release(false)
	p3.Release(false)
	if c.InFlight() != 0 {
		t.Fatalf("in flight %d", c.InFlight())
	}

	// Adaptive: drops shrink the limit, used successes grow it.
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	ad, err := NewConcurrency(ConcurrencyConfig{Limit: 10, Adaptive: AIMD, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	var held []Permit
	for i := 0; i < 10; i++ {
		p, ok := ad.TryAcquire()
		if !ok {
			t.Fatalf("acquire %d", i)
		}
		held = append(held, p)
	}
	now = now.Add(10 * time.Millisecond)
	for _, p := range held {
		p.Release(false)
	}
	if ad.Limit() <= 10 {
		t.Errorf("limit %d after ten used successes, want growth", ad.Limit())
	}
	p, _ := ad.TryAcquire()
	now = now.Add(10 * time.Millisecond)
	before := ad.Limit()
	p.Release(true)
	if ad.Limit() >= before {
		t.Errorf("limit %d after a drop, was %d", ad.Limit(), before)
	}
	if _, err := NewConcurrency(ConcurrencyConfig{}); err == nil {
		t.Error("zero limit accepted")
	}
}
