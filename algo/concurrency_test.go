package algo

import (
	"context"
	"errors"
	"github.com/allot-io/allot/internal/testwait"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustConcurrency(t *testing.T, limit int64) *Concurrency {
	t.Helper()
	c, err := NewConcurrency(limit)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConcurrencyTryAcquire(t *testing.T) {
	c := mustConcurrency(t, 3)
	if !c.TryAcquire(2) || !c.TryAcquire(1) {
		t.Fatal("cost within the limit refused")
	}
	if c.TryAcquire(1) {
		t.Fatal("admitted beyond the limit")
	}
	c.Release(2)
	if c.InFlight() != 1 || !c.TryAcquire(2) {
		t.Fatalf("after release: in flight %d", c.InFlight())
	}
	if _, err := NewConcurrency(0); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewConcurrency(0) = %v", err)
	}
}

func TestConcurrencyAcquireWaitsInOrder(t *testing.T) {
	c := mustConcurrency(t, 2)
	ctx := context.Background()
	if err := c.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	var wg sync.WaitGroup
	for i := 1; i <= 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Acquire(ctx, 1); err != nil {
				t.Error(err)
				return
			}
			order <- i
		}()
		testwait.For(t, 10*time.Second, "the waiters to block", func() bool { return c.Waiting() == i })
	}
	if c.TryAcquire(1) {
		t.Fatal("TryAcquire overtook waiters")
	}
	// Each release makes room for exactly one waiter: the oldest.
	for want := 1; want <= 3; want++ {
		c.Release(1)
		if got := <-order; got != want {
			t.Fatalf("grant %d went to waiter %d", want, got)
		}
	}
	wg.Wait()
}

func TestConcurrencyAcquireContext(t *testing.T) {
	c := mustConcurrency(t, 1)
	c.TryAcquire(1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Acquire(ctx, 1) }()
	testwait.For(t, 10*time.Second, "the waiters to block", func() bool { return c.Waiting() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire after cancel = %v", err)
	}
	if c.Waiting() != 0 || c.InFlight() != 1 {
		t.Fatalf("cancelled waiter left state: waiting %d in flight %d", c.Waiting(), c.InFlight())
	}
	if err := c.Acquire(context.Background(), 5); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("cost over the limit: %v", err)
	}
}

func TestConcurrencySetLimitWakesWaiters(t *testing.T) {
	c := mustConcurrency(t, 1)
	c.TryAcquire(1)
	done := make(chan error)
	go func() { done <- c.Acquire(context.Background(), 1) }()
	testwait.For(t, 10*time.Second, "the waiters to block", func() bool { return c.Waiting() == 1 })
	c.SetLimit(2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.InFlight() != 2 {
		t.Fatalf("in flight %d, want 2", c.InFlight())
	}
}

// TestConcurrencyNeverExceedsLimit hammers the limiter from many goroutines
// and records the highest cost ever in flight.
func TestConcurrencyNeverExceedsLimit(t *testing.T) {
	c := mustConcurrency(t, 5)
	var inFlight, peak atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				cost := int64(1 + (g+i)%2)
				if g%2 == 0 {
					if !c.TryAcquire(cost) {
						continue
					}
				} else if err := c.Acquire(context.Background(), cost); err != nil {
					t.Error(err)
					return
				}
				n := inFlight.Add(cost)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				inFlight.Add(-cost)
				c.Release(cost)
			}
		}()
	}
	wg.Wait()
	if peak.Load() > 5 {
		t.Fatalf("peak in flight %d over the limit of 5", peak.Load())
	}
	if c.InFlight() != 0 || c.Waiting() != 0 {
		t.Fatalf("leftover: in flight %d, waiting %d", c.InFlight(), c.Waiting())
	}
}

func BenchmarkConcurrency(b *testing.B) {
	c, _ := NewConcurrency(1 << 30)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if c.TryAcquire(1) {
				c.Release(1)
			}
		}
	})
}
