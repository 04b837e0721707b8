package intake

import "testing"

// TestBound: the table of what the intake takes. Regular reports up
// to the bound; early ones from nodes the leader knows only below half of
// it and while rounds keep up; a node's first report of the term up to
// the bound, whatever it is.
func TestBound(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		inFlight              int
		urgent, known, behind bool
		want                  bool
	}{
		{"regular, room left", 7, false, true, false, true},
		{"regular, at the bound", 8, false, true, false, false},
		{"regular, rounds behind", 3, false, true, true, true},
		{"early, below half", 3, true, true, false, true},
		{"early, at half", 4, true, true, false, false},
		{"early, rounds behind", 0, true, true, true, false},
		{"early from an unknown node, at half", 4, true, false, false, true},
		{"early from an unknown node, at the bound", 8, true, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := NewBound(8)
			in.inFlight.Store(int64(tc.inFlight))
			if got := in.Take(tc.urgent, tc.known, tc.behind); got != tc.want {
				t.Fatalf("take with %d in flight: %v, want %v", tc.inFlight, got, tc.want)
			}
			want := int64(tc.inFlight)
			if tc.want {
				want++
			}
			if got := in.inFlight.Load(); got != want {
				t.Fatalf("%d in flight after take; want %d", got, want)
			}
		})
	}
	if in := NewBound(-1); !in.Take(true, true, true) {
		t.Fatal("an unbounded intake shed a report")
	}
}
