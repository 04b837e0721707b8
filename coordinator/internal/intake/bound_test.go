package intake

import "testing"

// TestBound: the table of what the intake takes. Regular reports up
// to the bounds, in reports and in entries, a report alone whatever its
// size; early ones from nodes the leader knows only below half of either
// and while rounds keep up; a node's first report of the term up to the
// bounds, whatever it is.
func TestBound(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		inFlight, entries     int // in flight before, and the report's entries
		urgent, known, behind bool
		want                  bool
	}{
		{"regular, room left", 7, 10, false, true, false, true},
		{"regular, at the bound", 8, 10, false, true, false, false},
		{"regular, rounds behind", 3, 10, false, true, true, true},
		{"early, below half", 3, 10, true, true, false, true},
		{"early, at half", 4, 10, true, true, false, false},
		{"early, rounds behind", 0, 10, true, true, true, false},
		{"early from an unknown node, at half", 4, 10, true, false, false, true},
		{"early from an unknown node, at the bound", 8, 10, true, false, false, false},
		// 1,000 entries at most: 100 in flight a report before the take.
		{"regular, entries fit", 2, 800, false, true, false, true},
		{"regular, entries past the bound", 2, 801, false, true, false, false},
		{"regular, larger than the bound, alone", 0, 5000, false, true, false, true},
		{"early, entries past half", 2, 301, true, true, false, false},
		{"early from an unknown node, entries past half", 2, 301, true, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := NewBound(8, 1000)
			in.inFlight.Store(int64(tc.inFlight))
			in.entries.Store(int64(tc.inFlight) * 100)
			if got := in.Take(tc.urgent, tc.known, tc.behind, tc.entries); got != tc.want {
				t.Fatalf("take of %d entries with %d in flight: %v, want %v", tc.entries, tc.inFlight, got, tc.want)
			}
			want, wantEntries := int64(tc.inFlight), int64(tc.inFlight)*100
			if tc.want {
				want++
				wantEntries += int64(tc.entries)
			}
			if got := in.InFlight(); got != want {
				t.Fatalf("%d in flight after take; want %d", got, want)
			}
			if got := in.EntriesInFlight(); got != wantEntries {
				t.Fatalf("%d entries in flight after take; want %d", got, wantEntries)
			}
			if tc.want {
				in.Done(tc.entries)
				if in.InFlight() != int64(tc.inFlight) || in.EntriesInFlight() != int64(tc.inFlight)*100 {
					t.Fatalf("done left %d reports and %d entries in flight", in.InFlight(), in.EntriesInFlight())
				}
			}
		})
	}
	if in := NewBound(-1, -1); !in.Take(true, true, true, 1<<20) {
		t.Fatal("an unbounded intake shed a report")
	}
}
