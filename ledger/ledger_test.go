package ledger_test

import (
	"cmp"
	"testing"
	"time"

	"github.com/allot-io/allot/ledger"
)

func TestCompareKeysIsBytewise(t *testing.T) {
	ordered := []ledger.Key{
		{Window: -1, Tenant: "z"},
		{Window: 1, Tenant: "z"},
		{Window: 2},
		{Window: 2, Tenant: "B"},
		{Window: 2, Tenant: "a"},
		{Window: 2, Tenant: "a", Rule: "R"},
		{Window: 2, Tenant: "a", Rule: "r"},
		{Window: 2, Tenant: "a", Rule: "r", Region: "eu"},
		{Window: 2, Tenant: "a", Rule: "r", Region: "eu\x00"},
		{Window: 2, Tenant: "a\x00"},
		{Window: 2, Tenant: "é"},
	}
	for i := range ordered {
		for j := range ordered {
			if got, want := ledger.CompareKeys(ordered[i], ordered[j]), cmp.Compare(i, j); got != want {
				t.Errorf("CompareKeys(%v, %v) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}

func TestPositionOrder(t *testing.T) {
	a := ledger.Key{Window: 3600, Tenant: "a", Rule: "r", Region: "eu"}
	b := ledger.Key{Window: 3600, Tenant: "b", Rule: "r", Region: "eu"}
	at := func(k ledger.Key, lines uint64) ledger.Position {
		return ledger.Position{Set: true, Last: k, Lines: lines, Batches: 1}
	}
	tests := []struct {
		name        string
		p, q        ledger.Position
		after, same bool
	}{
		{"nothing exported, twice", ledger.Position{}, ledger.Position{}, false, true},
		{"a first batch", at(a, 1), ledger.Position{}, true, false},
		{"before the first batch", ledger.Position{}, at(a, 1), false, false},
		{"a later key", at(b, 2), at(a, 1), true, false},
		{"an earlier key", at(a, 1), at(b, 2), false, false},
		{"one position", at(a, 1), at(a, 1), false, true},
		{"another batch count only", at(a, 1), ledger.Position{Set: true, Last: a, Lines: 1, Batches: 7}, false, true},
		{"the same key, another line count", at(a, 2), at(a, 1), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.After(tt.q); got != tt.after {
				t.Errorf("%v.After(%v) = %v, want %v", tt.p, tt.q, got, tt.after)
			}
			if got := tt.p.Same(tt.q); got != tt.same {
				t.Errorf("%v.Same(%v) = %v, want %v", tt.p, tt.q, got, tt.same)
			}
			if got := tt.q.Same(tt.p); got != tt.same {
				t.Errorf("Same is not symmetric: %v.Same(%v) = %v", tt.q, tt.p, got)
			}
		})
	}
}

func TestAdvance(t *testing.T) {
	lines := []ledger.Line{
		{Key: ledger.Key{Window: 0, Tenant: "a"}},
		{Key: ledger.Key{Window: 0, Tenant: "b"}},
	}
	p := ledger.Position{}.Advance(lines)
	if want := (ledger.Position{Set: true, Last: lines[1].Key, Lines: 2, Batches: 1}); p != want {
		t.Fatalf("Advance from nothing = %v, want %v", p, want)
	}
	p = p.Advance(lines[:1])
	if want := (ledger.Position{Set: true, Last: lines[0].Key, Lines: 3, Batches: 2}); p != want {
		t.Fatalf("Advance = %v, want %v", p, want)
	}
}

func TestWindowTimes(t *testing.T) {
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	l := ledger.Line{Key: ledger.Key{Window: start.Unix(), Tenant: "acme", Rule: "quota", Region: "eu"}, WindowSeconds: 3600}
	if got := l.Start(); !got.Equal(start) || got.Location() != time.UTC {
		t.Errorf("Start = %v, want %v in UTC", got, start)
	}
	if got, want := l.End(), start.Add(time.Hour); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("End = %v, want %v in UTC", got, want)
	}
	if got, want := l.Key.String(), `window 2026-11-29T10:00:00Z tenant "acme" rule "quota" region "eu"`; got != want {
		t.Errorf("String = %s, want %s", got, want)
	}
	granted := 2.5
	l.Admitted, l.Denied, l.Granted, l.Final = 7, 3, &granted, true
	if got, want := l.String(), `window 2026-11-29T10:00:00Z tenant "acme" rule "quota" region "eu" (3600 s): admitted 7, denied 3, granted 2.5, final`; got != want {
		t.Errorf("Line.String = %s, want %s", got, want)
	}
	if _, ok := l.Cycle(); ok {
		t.Errorf("a line without terms has a cycle")
	}
	l.Terms = ledger.Terms{CycleStart: time.Date(2026, 11, 17, 5, 0, 0, 0, time.UTC).Unix(), Limit: 100000}
	l.Overage = 4
	if got, ok := l.Cycle(); !ok || !got.Equal(time.Date(2026, 11, 17, 5, 0, 0, 0, time.UTC)) || got.Location() != time.UTC {
		t.Errorf("Cycle = %v, %v; want 2026-11-17T05:00:00Z in UTC", got, ok)
	}
	if got, want := l.String(), `window 2026-11-29T10:00:00Z tenant "acme" rule "quota" region "eu" (3600 s): admitted 7, denied 3, overage 4, granted 2.5, cycle from 2026-11-17T05:00:00Z, limit 100000, final`; got != want {
		t.Errorf("Line.String with terms = %s, want %s", got, want)
	}
	if got, want := (ledger.Position{Set: true, Last: l.Key, Lines: 3, Batches: 2}).String(),
		`after window 2026-11-29T10:00:00Z tenant "acme" rule "quota" region "eu" (3 lines, 2 batches)`; got != want {
		t.Errorf("Position.String = %s, want %s", got, want)
	}
}
