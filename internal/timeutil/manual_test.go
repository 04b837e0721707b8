package timeutil

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case t := <-c:
		return t, true
	default:
		return time.Time{}, false
	}
}

func TestManualTimer(t *testing.T) {
	m := NewManual(t0)
	tm := m.NewTimer(time.Second)
	if m.Waiters() != 1 {
		t.Fatalf("waiters %d", m.Waiters())
	}
	m.Advance(999 * time.Millisecond)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("fired early")
	}
	m.Advance(time.Millisecond)
	if at, ok := fired(tm.C()); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("fired %v %v", at, ok)
	}
	if m.Waiters() != 0 || tm.Stop() {
		t.Fatal("a fired timer is still active")
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a fired timer says it was active")
	}
	if !tm.Stop() {
		t.Fatal("Stop of a reset timer says it was not active")
	}
	m.Advance(time.Hour)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("a stopped timer fired")
	}
}

func TestManualTickerDropsTicks(t *testing.T) {
	m := NewManual(t0)
	tk := m.NewTicker(time.Second)
	m.Advance(3500 * time.Millisecond) // three ticks due; the channel holds one
	at, ok := fired(tk.C())
	if !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("first tick %v %v", at, ok)
	}
	if _, ok := fired(tk.C()); ok {
		t.Fatal("a second tick was kept")
	}
	m.Advance(500 * time.Millisecond) // the next is at 4 s
	if at, ok := fired(tk.C()); !ok || !at.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("tick at 4 s: %v %v", at, ok)
	}
	tk.Reset(10 * time.Second)
	m.Advance(9 * time.Second)
	if _, ok := fired(tk.C()); ok {
		t.Fatal("ticked before the reset interval")
	}
	m.Advance(time.Second)
	if _, ok := fired(tk.C()); !ok {
		t.Fatal("no tick at the reset interval")
	}
	tk.Stop()
	if m.Waiters() != 0 {
		t.Fatal("a stopped ticker is still waiting")
	}
}

func TestManualOrderAndNow(t *testing.T) {
	m := NewManual(t0)
	a, b := m.NewTimer(2*time.Second), m.NewTimer(time.Second)
	m.Advance(5 * time.Second)
	ta, _ := fired(a.C())
	tb, _ := fired(b.C())
	if !tb.Before(ta) || !m.Now().Equal(t0.Add(5*time.Second)) {
		t.Fatalf("b %v a %v now %v", tb, ta, m.Now())
	}
	m.Set(t0) // backwards: nothing fires, time stays
	if !m.Now().Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("now %v after a step back", m.Now())
	}
	z := m.NewTimer(0)
	if _, ok := fired(z.C()); !ok {
		t.Fatal("a timer of 0 did not fire at once")
	}
}

func TestSources(t *testing.T) {
	if _, ok := Sources(nowOnly{}).(System); !ok {
		t.Fatal("a Now-only clock gets system timers")
	}
	m := NewManual(t0)
	if Sources(m) != TimeSource(m) {
		t.Fatal("a Manual is its own source")
	}
}

type nowOnly struct{}

func (nowOnly) Now() time.Time { return t0 }
