package intake

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/testwait"
)

// scriptedVerify is a verification the test finishes by hand: each call
// announces itself on started and returns what is sent on finish.
type scriptedVerify struct {
	calls   atomic.Int32
	started chan int32
	finish  chan error
}

func newScriptedVerify() *scriptedVerify {
	return &scriptedVerify{started: make(chan int32, 16), finish: make(chan error)}
}

func (v *scriptedVerify) verify() error {
	v.started <- v.calls.Add(1)
	return <-v.finish
}

func waitCall(t *testing.T, v *scriptedVerify, want int32) {
	t.Helper()
	select {
	case got := <-v.started:
		if got != want {
			t.Fatalf("verification %d started; want %d", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("verification %d never started", want)
	}
}

// TestLeaderCheckCoalesces: reports that arrive while a verification runs
// do not take its answer (it started before them); they share the next
// one, which starts when it ends. Any number of them cost one more round.
func TestLeaderCheckCoalesces(t *testing.T) {
	v := newScriptedVerify()
	l := NewLeaderCheck(v.verify)
	ctx := context.Background()

	first := make(chan error, 1)
	go func() { first <- l.Wait(ctx) }()
	waitCall(t, v, 1) // round 1 runs, for the first report only

	const later = 20
	var wg sync.WaitGroup
	var answered atomic.Int32
	errs := make(chan error, later)
	for i := 0; i < later; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := l.Wait(ctx)
			answered.Add(1)
			errs <- err
		}()
	}
	testwait.For(t, 10*time.Second, "the later reports to queue for the next round", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.pending != nil && l.pending.waiters == later
	})
	v.finish <- nil // round 1 confirms leadership
	if err := <-first; err != nil {
		t.Fatalf("first report: %v", err)
	}
	waitCall(t, v, 2) // round 2 starts at once, for all of them
	if n := answered.Load(); n != 0 {
		t.Fatalf("%d later reports were answered by a verification that started before they arrived", n)
	}
	lost := errors.New("leadership lost")
	v.finish <- lost // round 2 finds leadership lost
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, lost) {
			t.Errorf("a later report got %v; want the round's error", err)
		}
	}
	if n := v.calls.Load(); n != 2 {
		t.Errorf("%d verifications for %d reports; want 2", n, later+1)
	}
}

// TestLeaderCheckContext: a report whose context ends stops waiting; the
// round goes on and serves the others.
func TestLeaderCheckContext(t *testing.T) {
	v := newScriptedVerify()
	l := NewLeaderCheck(v.verify)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() { gone <- l.Wait(ctx) }()
	waitCall(t, v, 1)
	stays := make(chan error, 1)
	go func() { stays <- l.Wait(context.Background()) }()
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait returned %v", err)
	}
	v.finish <- nil
	waitCall(t, v, 2)
	v.finish <- nil
	if err := <-stays; err != nil {
		t.Fatalf("the remaining report: %v", err)
	}
	// Idle again: a new report starts a new round.
	again := make(chan error, 1)
	go func() { again <- l.Wait(context.Background()) }()
	waitCall(t, v, 3)
	v.finish <- nil
	if err := <-again; err != nil {
		t.Fatal(err)
	}
}
