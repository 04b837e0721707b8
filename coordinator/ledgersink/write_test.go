package ledgersink_test

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/ledger"
)

// totals are what allot_usage holds, summed.
type totals struct{ Rows, Admitted, Denied int64 }

func sumUsage(t *testing.T, dsn string) totals {
	t.Helper()
	var tot totals
	err := connect(t, dsn).QueryRow(ctxFor(t, 10*time.Second),
		"SELECT count(*), coalesce(sum(admitted), 0)::int8, coalesce(sum(denied), 0)::int8 FROM allot_usage").
		Scan(&tot.Rows, &tot.Admitted, &tot.Denied)
	if err != nil {
		t.Fatal(err)
	}
	return tot
}

func TestWriteMovesThePosition(t *testing.T) {
	s, dsn := migrated(t)
	ctx := ctxFor(t, time.Minute)
	start, err := s.Position(ctx, "eu-1")
	if err != nil || start != (ledger.Position{}) {
		t.Fatalf("position before any batch: %+v, %v; want the zero Position", start, err)
	}
	first := batch(hour(0), 3)
	pos, err := s.Write(ctx, "eu-1", start, first)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.Position{Set: true, Last: first[2].Key, Lines: 3, Batches: 1}
	if pos != want {
		t.Errorf("Write returned %+v, want %+v", pos, want)
	}
	second := batch(hour(1), 2)
	pos, err = s.Write(ctx, "eu-1", pos, second)
	if err != nil {
		t.Fatal(err)
	}
	want = ledger.Position{Set: true, Last: second[1].Key, Lines: 5, Batches: 2}
	if pos != want {
		t.Errorf("the second Write returned %+v, want %+v", pos, want)
	}
	for _, cluster := range []string{"eu-1", "us-1"} {
		got, err := s.Position(ctx, cluster)
		if err != nil {
			t.Fatal(err)
		}
		if cluster == "us-1" {
			want = ledger.Position{}
		}
		if got != want {
			t.Errorf("Position(%s) = %+v, want %+v", cluster, got, want)
		}
	}
	if got := sumUsage(t, dsn); got != (totals{Rows: 5, Admitted: 5, Denied: 0}) {
		t.Errorf("allot_usage holds %+v, want 5 rows admitting 5", got)
	}
}

func TestReplayIsRefused(t *testing.T) {
	s, dsn := migrated(t)
	ctx := ctxFor(t, time.Minute)
	lines := batch(hour(0), 10)
	for i := range lines {
		lines[i].Admitted, lines[i].Denied = 100, 7
	}
	pos, err := s.Write(ctx, "eu-1", ledger.Position{}, lines)
	if err != nil {
		t.Fatal(err)
	}
	before := sumUsage(t, dsn)
	tests := []struct {
		name  string
		from  ledger.Position
		lines []ledger.Line
	}{
		{"the same batch again", ledger.Position{}, lines},
		{"later lines read before the first batch", ledger.Position{}, batch(hour(1), 3)},
		{"a stale line count", ledger.Position{Set: true, Last: pos.Last, Lines: 9, Batches: 1}, batch(hour(1), 3)},
		{"a position that never was", ledger.Position{Set: true, Last: lines[4].Key, Lines: 5, Batches: 1}, batch(hour(1), 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Write(ctx, "eu-1", tt.from, tt.lines)
			var pe *ledgersink.PositionError
			if !errors.As(err, &pe) || !errors.Is(err, ledgersink.ErrPositionMoved) {
				t.Fatalf("Write = %v, want a *PositionError", err)
			}
			if pe.Stored != pos || pe.Expected != tt.from {
				t.Errorf("PositionError{Stored: %+v, Expected: %+v}, want {%+v, %+v}", pe.Stored, pe.Expected, pos, tt.from)
			}
			if c := ledgersink.Cause(err); c != "position" {
				t.Errorf("Cause = %q, want position", c)
			}
			if got := sumUsage(t, dsn); got != before {
				t.Errorf("allot_usage holds %+v after a refused Write, was %+v", got, before)
			}
			if got, _ := s.Position(ctx, "eu-1"); got != pos {
				t.Errorf("position %+v after a refused Write, was %+v", got, pos)
			}
		})
	}
}

func TestConcurrentWritersOneWins(t *testing.T) {
	s, dsn := migrated(t)
	const writers, rounds = 6, 5
	from := ledger.Position{}
	var want totals
	for round := range rounds {
		var (
			wg   sync.WaitGroup
			pos  = make([]ledger.Position, writers)
			errs = make([]error, writers)
		)
		for w := range writers {
			// Each writer its own sink (as a second leader would have),
			// and its own lines of the same next window.
			other := open(t, dsn)
			lines := batch(hour(round), 50+w)
			wg.Add(1)
			go func() {
				defer wg.Done()
				pos[w], errs[w] = other.Write(ctxFor(t, time.Minute), "eu-1", from, lines)
			}()
		}
		wg.Wait()
		won := -1
		for w, err := range errs {
			switch {
			case err == nil && won >= 0:
				t.Fatalf("round %d: writers %d and %d both won", round, won, w)
			case err == nil:
				won = w
			case !errors.Is(err, ledgersink.ErrPositionMoved):
				t.Fatalf("round %d: writer %d: %v, want ErrPositionMoved", round, w, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no writer won", round)
		}
		from = pos[won]
		want.Rows += int64(50 + won)
		want.Admitted += int64(50 + won)
		if got, err := s.Position(ctxFor(t, 10*time.Second), "eu-1"); err != nil || got != from {
			t.Fatalf("round %d: Position = %+v, %v; want the winner's %+v", round, got, err, from)
		}
	}
	if got := sumUsage(t, dsn); got != want {
		t.Errorf("allot_usage holds %+v, want the winners' %+v", got, want)
	}
	if from.Batches != rounds {
		t.Errorf("%d batches, want %d", from.Batches, rounds)
	}
}

func TestBadBatches(t *testing.T) {
	s, dsn := migrated(t)
	ctx := ctxFor(t, time.Minute)
	pos, err := s.Write(ctx, "eu-1", ledger.Position{}, batch(hour(5), 2))
	if err != nil {
		t.Fatal(err)
	}
	before := sumUsage(t, dsn)
	a, b := line(hour(6), "a", "r", "eu", 1), line(hour(6), "b", "r", "eu", 1)
	with := func(l ledger.Line, f func(*ledger.Line)) ledger.Line { f(&l); return l }
	tests := []struct {
		name    string
		cluster string
		from    ledger.Position
		lines   []ledger.Line
	}{
		{"empty", "eu-1", pos, nil},
		{"unsorted", "eu-1", pos, []ledger.Line{b, a}},
		{"a key twice", "eu-1", pos, []ledger.Line{a, a}},
		{"uppercase after lowercase", "eu-1", pos, []ledger.Line{a, line(hour(6), "B", "r", "eu", 1)}},
		{"the position's own key", "eu-1", pos, []ledger.Line{line(pos.Last.Window, pos.Last.Tenant, pos.Last.Rule, pos.Last.Region, 1)}},
		{"before the position", "eu-1", pos, []ledger.Line{line(hour(4), "z", "r", "eu", 1)}},
		{"a window of no seconds", "eu-1", pos, []ledger.Line{with(a, func(l *ledger.Line) { l.WindowSeconds = 0 })}},
		{"a window too long for integer", "eu-1", pos, []ledger.Line{with(a, func(l *ledger.Line) { l.WindowSeconds = math.MaxInt32 + 1 })}},
		{"a window past year 9999", "eu-1", pos, []ledger.Line{with(a, func(l *ledger.Line) { l.Window = math.MaxInt64 })}},
		{"a rule not UTF-8", "eu-1", pos, []ledger.Line{with(a, func(l *ledger.Line) { l.Rule = "\xff" })}},
		{"no cluster", "", ledger.Position{}, []ledger.Line{a}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Write(ctx, tt.cluster, tt.from, tt.lines)
			if !errors.Is(err, ledgersink.ErrBadBatch) {
				t.Fatalf("Write = %v, want ErrBadBatch", err)
			}
			if got := sumUsage(t, dsn); got != before {
				t.Errorf("allot_usage holds %+v after a bad batch, was %+v", got, before)
			}
		})
	}
	if got, _ := s.Position(ctx, "eu-1"); got != pos {
		t.Errorf("position %+v after bad batches, was %+v", got, pos)
	}
}

// TestAddingToAnExportedKey exports keys, forgets the position (as an
// operator re-creating a cluster under the same ID would) and exports
// the same keys again: counts add, saturating at bigint's maximum,
// granted adds with NULL as absent, overage adds and stays within
// admitted, and the terms are the second line's unless it has none.
func TestAddingToAnExportedKey(t *testing.T) {
	const max = math.MaxInt64
	cycle := time.Date(2025, 12, 17, 5, 0, 0, 0, time.UTC).Unix()
	older, newer := ledger.Terms{CycleStart: cycle, Limit: 100}, ledger.Terms{CycleStart: cycle, Limit: 400}
	tests := []struct {
		name                string
		first, second       uint64
		want                int64
		grantedA, grantedB  *float64
		wantGranted         *float64
		termsA, termsB, all ledger.Terms
	}{
		{"small counts, no grants", 3, 4, 7, nil, nil, nil, ledger.Terms{}, ledger.Terms{}, ledger.Terms{}},
		{"the first granted", 1, 1, 2, ptr(1.5), nil, ptr(1.5), older, ledger.Terms{}, older},
		{"the second granted", 1, 1, 2, nil, ptr(2), ptr(2), ledger.Terms{}, newer, newer},
		{"both granted", 1, 1, 2, ptr(1.5), ptr(2), ptr(3.5), older, newer, newer},
		{"a count past MaxInt64 saturates", math.MaxUint64, 0, max, nil, nil, nil, older, ledger.Terms{Limit: 400}, ledger.Terms{CycleStart: cycle, Limit: 400}},
		{"MaxInt64 exactly", max, 0, max, nil, nil, nil, ledger.Terms{}, ledger.Terms{}, ledger.Terms{}},
		{"a sum past MaxInt64 saturates", max - 1, 5, max, nil, nil, nil, ledger.Terms{}, ledger.Terms{}, ledger.Terms{}},
		{"both saturated", math.MaxUint64, math.MaxUint64, max, nil, nil, nil, ledger.Terms{}, ledger.Terms{}, ledger.Terms{}},
	}
	s, dsn := migrated(t)
	conn := connect(t, dsn)
	ctx := ctxFor(t, time.Minute)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := ledger.Key{Window: hour(i), Tenant: "t", Rule: "r", Region: "eu"}
			write := func(admitted uint64, granted *float64, terms ledger.Terms) {
				t.Helper()
				pos, err := s.Position(ctx, "c")
				if err != nil {
					t.Fatal(err)
				}
				if pos.Set && ledger.CompareKeys(pos.Last, key) >= 0 {
					// Forget the position, as a re-created cluster would.
					if _, err := conn.Exec(ctx, "DELETE FROM allot_export_position WHERE cluster_id = 'c'"); err != nil {
						t.Fatal(err)
					}
					pos = ledger.Position{}
				}
				l := ledger.Line{Key: key, WindowSeconds: 3600, Admitted: admitted, Denied: admitted, Granted: granted, Terms: terms, Overage: admitted / 2}
				if _, err := s.Write(ctx, "c", pos, []ledger.Line{l}); err != nil {
					t.Fatal(err)
				}
			}
			write(tt.first, tt.grantedA, tt.termsA)
			write(tt.second, tt.grantedB, tt.termsB)
			lines, _, err := s.Query(ctx, "c", ledgersink.Query{From: key.Window, To: key.Window + 1})
			if err != nil || len(lines) != 1 {
				t.Fatalf("Query: %v, %v; want the one line", lines, err)
			}
			got := lines[0]
			// Half of each export's admitted units were overage: they add
			// as admitted does, saturating, and never pass it.
			wantOverage := min(clampTo(tt.first/2)+clampTo(tt.second/2), uint64(tt.want))
			if got.Admitted != uint64(tt.want) || got.Denied != uint64(tt.want) || got.Overage != wantOverage {
				t.Errorf("admitted %d denied %d overage %d, want %d, %d and %d", got.Admitted, got.Denied, got.Overage, tt.want, tt.want, wantOverage)
			}
			switch {
			case (got.Granted == nil) != (tt.wantGranted == nil):
				t.Errorf("granted %v, want %v", got.Granted, tt.wantGranted)
			case got.Granted != nil && *got.Granted != *tt.wantGranted:
				t.Errorf("granted %v, want %v", *got.Granted, *tt.wantGranted)
			}
			if got.Terms != tt.all {
				t.Errorf("terms %+v, want %+v", got.Terms, tt.all)
			}
		})
	}
}

// clampTo is n as a bigint stores it: at most math.MaxInt64.
func clampTo(n uint64) uint64 { return min(n, math.MaxInt64) }
