package coordinator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	allotpb "github.com/allot-io/allot/proto"
)

// TestLedgerSaturates: ledger totals stop at the largest count instead of
// wrapping around to a small one.
func TestLedgerSaturates(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, cmdSettings, &allotpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	f.Apply(entry(t, 2, cmdReports, usageCmd(hour0, "gw-1", 1, 1, "acme", math.MaxUint64-10, math.MaxUint64-1)))
	f.Apply(entry(t, 3, cmdReports, usageCmd(hour0, "gw-2", 1, 1, "acme", 100, 3)))
	if a, d := ledgerTotal(f, "acme"); a != math.MaxUint64 || d != math.MaxUint64 {
		t.Fatalf("ledger %d admitted, %d denied; want both saturated at %d", a, d, uint64(math.MaxUint64))
	}
}

// fillLedger applies n ledger lines in one region, one tenant per line,
// spread over windows, through the FSM.
func fillLedger(t testing.TB, f *fsm, index uint64, n int, region string, at time.Time) {
	cmd := &allotpb.ReportsCommand{ProposedUnixNano: at.UnixNano()}
	for i := 0; i < n; {
		b := &allotpb.UsageBatch{Seq: 1, CutUnixNano: at.UnixNano()}
		for ; i < n && len(b.Counts) < 10000; i++ {
			b.Counts = append(b.Counts, &allotpb.UsageCount{Rule: "plan-quota", Tenant: fmt.Sprintf("tenant-%07d", i), WindowUnix: at.Unix(), Admitted: uint64(i + 1)})
		}
		cmd.Reports = append(cmd.Reports, &allotpb.AgentUsage{Node: fmt.Sprintf("gw-%s-%d-%d", region, at.Unix(), i), Incarnation: 1, Region: region, Batch: b})
	}
	data, err := encodeCommand(cmdReports, cmd)
	if err != nil {
		t.Fatal(err)
	}
	f.Apply(rawEntry(index, data))
}

// TestQueryUsageBoundsTheScan: a filtered query over a large ledger that
// few lines match does not read the whole ledger for one page: it stops
// after a bounded scan and returns a continuation token, even with an
// empty page; following the tokens finds every match exactly once.
func TestQueryUsageBoundsTheScan(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, cmdSettings, &allotpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	fillLedger(t, f, 2, 50_000, "eu-west", hour0)
	f.Apply(entry(t, 3, cmdReports, &allotpb.ReportsCommand{ProposedUnixNano: hour0.UnixNano(), Reports: []*allotpb.AgentUsage{{
		Node: "gw-us", Incarnation: 1, Region: "us-east", Batch: &allotpb.UsageBatch{Seq: 1, Counts: []*allotpb.UsageCount{
			{Rule: "plan-quota", Tenant: "tenant-9999999", WindowUnix: hour0.Unix(), Admitted: 7},
		}},
	}}}))
	c := &Coordinator{fsm: f}
	q := &allotpb.UsageQuery{Region: "us-east", PageSize: 10}
	first, err := c.queryUsage(q)
	if err != nil {
		t.Fatal(err)
	}
	if first.GetNextPageToken() == "" {
		t.Fatalf("one page scanned all 50,001 lines for a filter only the last matches: %d records, no token", len(first.GetRecords()))
	}
	var got []*allotpb.UsageRecord
	pages := 0
	for resp := first; ; {
		pages++
		got = append(got, resp.GetRecords()...)
		if resp.GetNextPageToken() == "" {
			break
		}
		q.PageToken = resp.GetNextPageToken()
		if resp, err = c.queryUsage(q); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0].GetTenant() != "tenant-9999999" || got[0].GetAdmitted() != 7 {
		t.Fatalf("got %v; want the one us-east line", got)
	}
	t.Logf("found the one match in %d pages", pages)
}

// indexKeys returns the index's keys in order.
func indexKeys(s *state) []ledgerKey {
	var out []ledgerKey
	s.index.Ascend(func(k ledgerKey) bool { out = append(out, k); return true })
	return out
}

// checkIndex fails unless the index holds exactly the ledger's keys, in
// order.
func checkIndex(t *testing.T, f *fsm, when string) {
	t.Helper()
	f.read(func(s *state) {
		keys := indexKeys(s)
		if len(keys) != len(s.ledger) {
			t.Fatalf("%s: index has %d keys, ledger %d lines", when, len(keys), len(s.ledger))
		}
		for i, k := range keys {
			if s.ledger[k] == nil {
				t.Fatalf("%s: index key %v is not in the ledger", when, k)
			}
			if i > 0 && compareLedgerKeys(keys[i-1], k) >= 0 {
				t.Fatalf("%s: index out of order at %d: %v then %v", when, i, keys[i-1], k)
			}
		}
	})
}

// randomLedger applies n reports of random lines over 12 hourly windows
// from hour0, 40 tenants, 3 rules and 2 regions, and returns the next
// free log index.
func randomLedger(t *testing.T, f *fsm, rng *rand.Rand, index uint64, n int) uint64 {
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
		f.Apply(entry(t, index, cmdReports, &allotpb.ReportsCommand{ProposedUnixNano: at.UnixNano(), Reports: []*allotpb.AgentUsage{
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
	f.Apply(entry(t, 1, cmdSettings, &allotpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	next := randomLedger(t, f, rng, 2, 400)
	checkIndex(t, f, "after applies")
	// Every window closes; the agents are long silent, so all are final.
	// A retention of 6 h at hour0+14h drops the windows that ended before
	// hour0+8h: the first eight.
	f.Apply(entry(t, next, cmdMaintain, &allotpb.MaintainCommand{
		NowUnixNano: hour0.Add(14 * time.Hour).UnixNano(), AgentTimeoutNano: int64(time.Minute), RetentionNano: int64(6 * time.Hour),
	}))
	checkIndex(t, f, "after retention")
	f.read(func(s *state) {
		for k := range s.ledger {
			if k.window < hour0.Add(7*time.Hour).Unix() {
				t.Fatalf("line %v outlived the retention", k)
			}
		}
		if len(s.ledger) == 0 {
			t.Fatal("retention dropped every window")
		}
	})
	g := roundTrip(t, f)
	checkIndex(t, g, "after restore")
}

// allPages pages through a query with the given page size and scan
// budget, calling between before each page after the first.
func allPages(t *testing.T, f *fsm, q ledgerQuery, size, budget int, between func()) []ledgerKey {
	t.Helper()
	var out []ledgerKey
	var after *ledgerKey
	for pages := 0; ; pages++ {
		if pages > 1_000_000 {
			t.Fatal("paging does not end")
		}
		var keys []ledgerKey
		var next ledgerKey
		var more bool
		f.read(func(s *state) { keys, next, more = s.ledgerPage(q, after, size, budget) })
		if len(keys) > size {
			t.Fatalf("a page of %d lines; the page size is %d", len(keys), size)
		}
		out = append(out, keys...)
		if !more {
			return out
		}
		// The token format stays what it was: a key, base64.
		k, err := decodePageToken(encodePageToken(next))
		if err != nil || k != next {
			t.Fatalf("token for %v decodes to %v, %v", next, k, err)
		}
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
	f.Apply(entry(t, 1, cmdSettings, &allotpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	randomLedger(t, f, rng, 2, 600)
	var all []ledgerKey
	f.read(func(s *state) { all = indexKeys(s) })
	w := func(h int) int64 { return hour0.Add(time.Duration(h) * time.Hour).Unix() }
	queries := []ledgerQuery{
		{}, {tenant: "t07"}, {rule: "rule-1"}, {region: "us-east"}, {tenant: "t13", rule: "rule-2"},
		{tenant: "t21", region: "eu-west"}, {tenant: "t05", rule: "rule-0", region: "us-east"},
		{tenant: "nobody"}, {tenant: "t00"}, {tenant: "t39"}, {from: w(3), to: w(7)}, {from: w(2), to: w(9), tenant: "t11"},
	}
	for _, q := range queries {
		if q.to == 0 {
			q.from, q.to = math.MinInt64, math.MaxInt64
		}
		var want []ledgerKey
		for _, k := range all {
			if q.matches(k) {
				want = append(want, k)
			}
		}
		for _, size := range []int{1, 7, 1000} {
			for _, budget := range []int{1, 3, 50, maxScanPerPage} {
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
	f.Apply(entry(t, 1, cmdSettings, &allotpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	next := randomLedger(t, f, rng, 2, 300)
	var before []ledgerKey
	f.read(func(s *state) { before = indexKeys(s) })
	got := allPages(t, f, ledgerQuery{from: math.MinInt64, to: math.MaxInt64}, 25, maxScanPerPage, func() {
		next = randomLedger(t, f, rng, next, 5)
	})
	for i := 1; i < len(got); i++ {
		if compareLedgerKeys(got[i-1], got[i]) >= 0 {
			t.Fatalf("pages out of order or repeating at %d: %v then %v", i, got[i-1], got[i])
		}
	}
	seen := map[ledgerKey]bool{}
	for _, k := range got {
		seen[k] = true
	}
	for _, k := range before {
		if !seen[k] {
			t.Fatalf("line %v, there from the start, was skipped", k)
		}
	}
}
