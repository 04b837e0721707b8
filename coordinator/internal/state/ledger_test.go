package state

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
)

// TestLedgerSaturates: ledger totals stop at the largest count instead of
// wrapping around to a small one.
func TestLedgerSaturates(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	f.Apply(entry(t, 2, CmdReports, usageCmd(hour0, "gw-1", 1, 1, "acme", math.MaxUint64-10, math.MaxUint64-1)))
	f.Apply(entry(t, 3, CmdReports, usageCmd(hour0, "gw-2", 1, 1, "acme", 100, 3)))
	if a, d := ledgerTotal(f, "acme"); a != math.MaxUint64 || d != math.MaxUint64 {
		t.Fatalf("ledger %d admitted, %d denied; want both saturated at %d", a, d, uint64(math.MaxUint64))
	}
}

// indexKeys returns the ledger's keys in order.
func indexKeys(s *State) []ledger.Key {
	var out []ledger.Key
	s.eachLine(func(k ledger.Key, _ usage) { out = append(out, k) })
	return out
}

// checkIndex fails unless the ledger walks in order, through as many
// lines as it counts.
func checkIndex(t *testing.T, f *machine, when string) {
	t.Helper()
	f.read(func(s *State) {
		keys := indexKeys(s)
		if len(keys) != s.ledger.Len() {
			t.Fatalf("%s: the walk read %d keys, the ledger counts %d lines", when, len(keys), s.ledger.Len())
		}
		for i, k := range keys {
			if i > 0 && ledger.CompareKeys(keys[i-1], k) >= 0 {
				t.Fatalf("%s: index out of order at %d: %v then %v", when, i, keys[i-1], k)
			}
		}
	})
}

// randomLedger applies n reports of random lines over 12 hourly windows
// from hour0, 40 tenants, 3 rules and 2 regions, and returns the next
// free log index.
func randomLedger(t *testing.T, f *machine, rng *rand.Rand, index uint64, n int) uint64 {
	t.Helper()
	for i := 0; i < n; i++ {
		at := hour0.Add(time.Duration(rng.IntN(12*60)) * time.Minute)
		b := &allotpb.UsageBatch{Seq: 1, CutUnixNano: at.UnixNano()}
		for j := rng.IntN(8); j >= 0; j-- {
			b.Counts = append(b.Counts, &allotpb.UsageCount{
				Rule: fmt.Sprintf("rule-%d", rng.IntN(3)), Tenant: fmt.Sprintf("t%02d", rng.IntN(40)),
				WindowUnix: at.Unix(), Admitted: uint64(rng.IntN(100)), Denied: uint64(rng.IntN(3)),
			})
		}
		region := []string{"eu-west", "us-east"}[rng.IntN(2)]
		f.Apply(entry(t, index, CmdReports, &fsmpb.ReportsCommand{ProposedUnixNano: at.UnixNano(), Reports: []*fsmpb.AgentUsage{
			{Node: fmt.Sprintf("gw-%d", index), Incarnation: 1, Region: region, Batch: b},
		}}))
		index++
	}
	return index
}

// TestLedgerIndexFollowsTheLedger: the index holds exactly the ledger's
// keys through applies, retention and a snapshot restore.
func TestLedgerIndexFollowsTheLedger(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	f := testFSM()
	f.Apply(entry(t, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	next := randomLedger(t, f, rng, 2, 400)
	checkIndex(t, f, "after applies")
	// Every window closes; the agents are long silent, so all are final.
	// A retention of 6 h at hour0+14h drops the windows that ended before
	// hour0+8h: the first eight.
	f.Apply(entry(t, next, CmdMaintain, &fsmpb.MaintainCommand{
		NowUnixNano: hour0.Add(14 * time.Hour).UnixNano(), AgentTimeoutNano: int64(time.Minute), RetentionNano: int64(6 * time.Hour),
	}))
	checkIndex(t, f, "after retention")
	f.read(func(s *State) {
		for _, k := range indexKeys(s) {
			if k.Window < hour0.Add(7*time.Hour).Unix() {
				t.Fatalf("line %v outlived the retention", k)
			}
		}
		if s.ledger.Len() == 0 {
			t.Fatal("retention dropped every window")
		}
	})
	g := roundTrip(t, f)
	checkIndex(t, g, "after restore")
}

// allPages pages through a query with the given page size and scan
// budget, calling between before each page after the first.
func allPages(t *testing.T, f *machine, q LedgerQuery, size, budget int, between func()) []ledger.Key {
	t.Helper()
	var out []ledger.Key
	var after *ledger.Key
	for pages := 0; ; pages++ {
		if pages > 1_000_000 {
			t.Fatal("paging does not end")
		}
		var keys []ledger.Key
		var next ledger.Key
		var more bool
		f.read(func(s *State) {
			var lines []lineItem
			lines, next, more = s.ledgerPage(q, after, size, budget)
			for _, l := range lines {
				keys = append(keys, l.key)
			}
		})
		if len(keys) > size {
			t.Fatalf("a page of %d lines; the page size is %d", len(keys), size)
		}
		out = append(out, keys...)
		if !more {
			return out
		}
		k := next
		after = &k
		if between != nil {
			between()
		}
	}
}

// TestLedgerPagesEveryLineOnce: for every kind of filter, page size and
// scan budget, paging returns exactly the matching lines, in order, each
// once.
func TestLedgerPagesEveryLineOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	f := testFSM()
	f.Apply(entry(t, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	randomLedger(t, f, rng, 2, 600)
	var all []ledger.Key
	f.read(func(s *State) { all = indexKeys(s) })
	w := func(h int) int64 { return hour0.Add(time.Duration(h) * time.Hour).Unix() }
	queries := []LedgerQuery{
		{}, {Tenant: "t07"}, {Rule: "rule-1"}, {Region: "us-east"}, {Tenant: "t13", Rule: "rule-2"},
		{Tenant: "t21", Region: "eu-west"}, {Tenant: "t05", Rule: "rule-0", Region: "us-east"},
		{Tenant: "nobody"}, {Tenant: "t00"}, {Tenant: "t39"}, {From: w(3), To: w(7)}, {From: w(2), To: w(9), Tenant: "t11"},
	}
	for _, q := range queries {
		if q.To == 0 {
			q.From, q.To = math.MinInt64, math.MaxInt64
		}
		var want []ledger.Key
		for _, k := range all {
			if q.matches(k) {
				want = append(want, k)
			}
		}
		for _, size := range []int{1, 7, 1000} {
			for _, budget := range []int{1, 3, 50, MaxScanPerPage} {
				got := allPages(t, f, q, size, budget, nil)
				if !slices.Equal(got, want) {
					t.Fatalf("query %+v, page size %d, budget %d: got %d lines, want %d", q, size, budget, len(got), len(want))
				}
			}
		}
	}
}

// TestLedgerPagingWhileApplying: lines added while a billing job pages
// through never make it skip or repeat one that was there when it began,
// and pages stay in order.
func TestLedgerPagingWhileApplying(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	f := testFSM()
	f.Apply(entry(t, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	next := randomLedger(t, f, rng, 2, 300)
	var before []ledger.Key
	f.read(func(s *State) { before = indexKeys(s) })
	got := allPages(t, f, LedgerQuery{From: math.MinInt64, To: math.MaxInt64}, 25, MaxScanPerPage, func() {
		next = randomLedger(t, f, rng, next, 5)
	})
	for i := 1; i < len(got); i++ {
		if ledger.CompareKeys(got[i-1], got[i]) >= 0 {
			t.Fatalf("pages out of order or repeating at %d: %v then %v", i, got[i-1], got[i])
		}
	}
	seen := map[ledger.Key]bool{}
	for _, k := range got {
		seen[k] = true
	}
	for _, k := range before {
		if !seen[k] {
			t.Fatalf("line %v, there from the start, was skipped", k)
		}
	}
}

// TestDropFinalLinesKeepsWindowsNotFinal: dropping takes the ledger's
// first lines off the front while they are final, and past a window not
// final (an older window waiting on a silent agent while a newer one is
// final) goes on to the final lines behind it, keeping that window's.
func TestDropFinalLinesKeepsWindowsNotFinal(t *testing.T) {
	tests := []struct {
		name  string
		final []int64 // windows final, of 0 to 3 (two lines each)
		upTo  int64   // drop lines of windows up to this one
		want  []int64 // windows of the lines kept, in order
	}{
		{"all final", []int64{0, 1, 2, 3}, 2, []int64{3, 3}},
		{"an open window first", []int64{1, 2, 3}, 2, []int64{0, 0, 3, 3}},
		{"an open window between", []int64{0, 2, 3}, 2, []int64{1, 1, 3, 3}},
		{"none final", nil, 3, []int64{0, 0, 1, 1, 2, 2, 3, 3}},
		{"nothing within", []int64{0, 1, 2, 3}, -1, []int64{0, 0, 1, 1, 2, 2, 3, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			for w := range int64(4) {
				for _, tenant := range []string{"a", "b"} {
					s.ledger.ReplaceOrInsert(lineItem{key: ledger.Key{Window: w, Tenant: tenant, Rule: "r", Region: "eu"}})
				}
			}
			for _, w := range tt.final {
				s.final.ReplaceOrInsert(w)
				s.finalLines += 2
			}
			dropped := s.dropFinalLines(func(k ledger.Key) bool { return k.Window <= tt.upTo })
			var kept []int64
			s.ledger.Ascend(func(it lineItem) bool {
				kept = append(kept, it.key.Window)
				return true
			})
			if !slices.Equal(kept, tt.want) {
				t.Errorf("kept the lines of windows %v, want %v", kept, tt.want)
			}
			if want := 8 - len(tt.want); dropped != want {
				t.Errorf("dropped %d lines, want %d", dropped, want)
			}
			if want := 2*len(tt.final) - dropped; s.finalLines != want {
				t.Errorf("finalLines %d, want %d", s.finalLines, want)
			}
		})
	}
}
