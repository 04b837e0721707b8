package ledgersink_test

import (
	"math"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/ledger"
)

// TestCopyRoundTrip: every column of a line comes back from the table as
// it was written, at the edges of what the binary COPY encodes (the
// first and last windows a timestamptz holds, names with NUL, SOH and
// non-ASCII, counts past bigint, granted absent and present, the longest
// window, terms absent, partly and wholly recorded, overage), whether the batch
// went straight into allot_usage or, with a key already there, through
// the staging table, or as arrays (BenchmarkWrite's other way).
func TestCopyRoundTrip(t *testing.T) {
	lines := []ledger.Line{
		{Key: ledger.Key{Window: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), Tenant: "a", Rule: "r", Region: "eu"}, WindowSeconds: 1, Admitted: 0, Denied: 0},
		{Key: ledger.Key{Window: hour(0), Tenant: "\x00t\x01", Rule: "é", Region: "🌍"}, WindowSeconds: 3600, Admitted: math.MaxUint64, Denied: math.MaxInt64, Granted: ptr(0.5),
			Terms: ledger.Terms{CycleStart: time.Date(2025, 12, 17, 5, 0, 0, 0, time.UTC).Unix(), Limit: math.MaxInt64}},
		{Key: ledger.Key{Window: hour(0), Tenant: "t", Rule: "r", Region: "eu"}, WindowSeconds: math.MaxInt32, Admitted: 7, Denied: 3, Granted: ptr(-1e300),
			Terms: ledger.Terms{Limit: 1}, Overage: 6},
		{Key: ledger.Key{Window: hour(1), Tenant: "t", Rule: "r", Region: "eu"}, WindowSeconds: 3600, Admitted: 7,
			Terms: ledger.Terms{CycleStart: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()}},
		{Key: ledger.Key{Window: time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix(), Tenant: "z", Rule: "r", Region: "eu"}, WindowSeconds: 1, Admitted: 1},
	}
	lines[1].Overage = math.MaxUint64
	want := make([]ledger.Line, len(lines))
	copy(want, lines)
	want[1].Admitted, want[1].Overage = math.MaxInt64, math.MaxInt64 // saturated in a bigint
	for _, way := range []struct {
		name string
		use  func(*ledgersink.Sink)
	}{
		{"straight into allot_usage", func(*ledgersink.Sink) {}},
		{"through the staging table", ledgersink.UseCopyUpsert},
		{"as arrays", ledgersink.UseUnnest},
	} {
		t.Run(way.name, func(t *testing.T) {
			s, _ := migrated(t)
			ctx := ctxFor(t, time.Minute)
			way.use(s)
			if _, err := s.Write(ctx, "eu-1", ledger.Position{}, lines); err != nil {
				t.Fatal(err)
			}
			got, _, err := s.Query(ctx, "eu-1", ledgersink.Query{From: lines[0].Window})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d lines back, want %d", len(got), len(want))
			}
			for i := range want {
				g, w := got[i], want[i]
				if g.Key != w.Key || g.WindowSeconds != w.WindowSeconds || g.Admitted != w.Admitted || g.Denied != w.Denied ||
					(g.Granted == nil) != (w.Granted == nil) || g.Granted != nil && *g.Granted != *w.Granted || g.Terms != w.Terms || g.Overage != w.Overage {
					t.Errorf("line %d back as %+v (granted %v), want %+v (granted %v)", i, g, g.Granted, w, w.Granted)
				}
			}
		})
	}
}
