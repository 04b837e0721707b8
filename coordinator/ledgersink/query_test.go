package ledgersink_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/ledger"
)

// ledgers is lines of two clusters, every combination of the windows,
// tenants (bytewise: "\x00" < "\x01" < "B" < "Z" < "a" < "a\x00" <
// "a\x01b" < "b" < "é" < "日本"; the control characters are stored
// escaped), rules and regions below, in ledger order per cluster.
func ledgers() map[string][]ledger.Line {
	tenants := []string{"a", "é", "B", "日本", "b", "Z", "a\x00", "\x00", "a\x01b", "\x01"}
	rules := []string{"api", "API", "batch"}
	out := map[string][]ledger.Line{}
	for c, cluster := range []string{"eu-1", "us-1"} {
		regions := []string{"eu-west", "eu-central"}
		if c == 1 {
			regions = []string{"us-east"}
		}
		var lines []ledger.Line
		for w := range 4 {
			for _, tenant := range tenants {
				for _, rule := range rules {
					for _, region := range regions {
						l := line(hour(w), tenant, rule, region, uint64(len(lines)+1))
						if len(lines)%3 == 0 {
							l.Granted = ptr(float64(len(lines)) / 2)
						}
						lines = append(lines, l)
					}
				}
			}
		}
		slices.SortFunc(lines, func(a, b ledger.Line) int { return ledger.CompareKeys(a.Key, b.Key) })
		out[cluster] = lines
	}
	return out
}

// export writes lines in batches of n.
func export(t *testing.T, s *ledgersink.Sink, cluster string, lines []ledger.Line, n int) {
	t.Helper()
	pos := ledger.Position{}
	for len(lines) > 0 {
		k := min(n, len(lines))
		var err error
		if pos, err = s.Write(ctxFor(t, time.Minute), cluster, pos, lines[:k]); err != nil {
			t.Fatal(err)
		}
		lines = lines[k:]
	}
}

func TestQuery(t *testing.T) {
	s, _ := migrated(t)
	all := ledgers()
	for cluster, lines := range all {
		export(t, s, cluster, lines, 17)
	}
	eu := all["eu-1"]
	keep := func(f func(l ledger.Line) bool) []ledger.Line {
		return slices.DeleteFunc(slices.Clone(eu), func(l ledger.Line) bool { return !f(l) })
	}
	tests := []struct {
		name string
		q    ledgersink.Query
		want []ledger.Line
	}{
		{"everything", ledgersink.Query{}, eu},
		{"from a window", ledgersink.Query{From: hour(2)}, keep(func(l ledger.Line) bool { return l.Window >= hour(2) })},
		{"a window range", ledgersink.Query{From: hour(1), To: hour(3)}, keep(func(l ledger.Line) bool { return l.Window >= hour(1) && l.Window < hour(3) })},
		{"an empty range", ledgersink.Query{From: hour(3), To: hour(3)}, nil},
		{"a tenant", ledgersink.Query{Tenant: "é"}, keep(func(l ledger.Line) bool { return l.Tenant == "é" })},
		{"an uppercase tenant", ledgersink.Query{Tenant: "B"}, keep(func(l ledger.Line) bool { return l.Tenant == "B" })},
		{"a rule and a region", ledgersink.Query{Rule: "API", Region: "eu-central"}, keep(func(l ledger.Line) bool { return l.Rule == "API" && l.Region == "eu-central" })},
		{"a region of the other cluster", ledgersink.Query{Region: "us-east"}, nil},
		{"after a key", ledgersink.Query{After: &eu[40].Key}, eu[41:]},
		{"after a key with a tenant", ledgersink.Query{Tenant: "a", After: &eu[40].Key}, slices.DeleteFunc(slices.Clone(eu[41:]), func(l ledger.Line) bool { return l.Tenant != "a" })},
		{"after a key that is not stored", ledgersink.Query{After: &ledger.Key{Window: hour(1), Tenant: "C"}}, keep(func(l ledger.Line) bool {
			return ledger.CompareKeys(l.Key, ledger.Key{Window: hour(1), Tenant: "C"}) > 0
		})},
	}
	for _, tt := range tests {
		for _, limit := range []int{1, 7, 1000} {
			t.Run(fmt.Sprintf("%s/limit %d", tt.name, limit), func(t *testing.T) {
				var got []ledger.Line
				q := tt.q
				q.Limit = limit
				for pages := 0; ; pages++ {
					if pages > len(eu)+1 {
						t.Fatal("Query pages on forever")
					}
					page, more, err := s.Query(ctxFor(t, 10*time.Second), "eu-1", q)
					if err != nil {
						t.Fatal(err)
					}
					if len(page) > limit || (more && len(page) != limit) {
						t.Fatalf("a page of %d lines, more %v, with limit %d", len(page), more, limit)
					}
					got = append(got, page...)
					if !more {
						break
					}
					q.After = &page[len(page)-1].Key
				}
				if !equalLines(got, tt.want) {
					t.Errorf("got %d lines, want %d:\n got %v\nwant %v", len(got), len(tt.want), keys(got), keys(tt.want))
				}
			})
		}
	}
}

func equalLines(a, b []ledger.Line) bool {
	return slices.EqualFunc(a, b, func(x, y ledger.Line) bool {
		if x.Key != y.Key || x.WindowSeconds != y.WindowSeconds || x.Admitted != y.Admitted || x.Denied != y.Denied {
			return false
		}
		if x.Granted == nil || y.Granted == nil {
			return x.Granted == nil && y.Granted == nil
		}
		return *x.Granted == *y.Granted
	})
}

func keys(lines []ledger.Line) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = fmt.Sprintf("%d/%s/%s/%s", (l.Window-hour(0))/3600, l.Tenant, l.Rule, l.Region)
	}
	return out
}

// TestBillingQueries runs the queries docs quote on a small ledger and
// checks them against sums made here.
func TestBillingQueries(t *testing.T) {
	s, dsn := migrated(t)
	all := ledgers()
	for cluster, lines := range all {
		export(t, s, cluster, lines, 100)
	}
	conn := connect(t, dsn)
	ctx := ctxFor(t, 10*time.Second)
	from, to := time.Unix(hour(1), 0), time.Unix(hour(3), 0)
	in := func(l ledger.Line) bool { return l.Window >= hour(1) && l.Window < hour(3) }

	type sums struct{ admitted, denied int64 }
	wantByRule, wantByTenant := map[string]sums{}, map[string]sums{}
	wantMerged := map[string]int64{} // window/rule → regions
	for _, lines := range all {
		for _, l := range lines {
			if !in(l) {
				continue
			}
			s := wantByTenant[l.Tenant]
			wantByTenant[l.Tenant] = sums{s.admitted + int64(l.Admitted), s.denied + int64(l.Denied)}
			if l.Tenant == "é" {
				s := wantByRule[l.Rule]
				wantByRule[l.Rule] = sums{s.admitted + int64(l.Admitted), s.denied + int64(l.Denied)}
				wantMerged[fmt.Sprint(l.Window, l.Rule)]++
			}
		}
	}
	check := func(name, sql string, want map[string]sums, args ...any) {
		t.Helper()
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer rows.Close()
		got := map[string]sums{}
		var order []string
		for rows.Next() {
			var k string
			var s sums
			if err := rows.Scan(&k, &s.admitted, &s.denied); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got[ledgersink.LoadedName(k)] = s
			order = append(order, k)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
		if !slices.IsSorted(order) {
			t.Errorf("%s is not in bytewise order: %q", name, order)
		}
	}
	check("QueryTenantMonth", ledgersink.QueryTenantMonth, wantByRule, "é", from, to)
	check("QueryAllTenantsDay", ledgersink.QueryAllTenantsDay, wantByTenant, from, to)

	rows, err := conn.Query(ctx, ledgersink.QueryRegionsMerged, "é", from, to)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			window                    time.Time
			tenant, rule              string
			admitted, denied, regions int64
			granted                   *float64
		)
		if err := rows.Scan(&window, &tenant, &rule, &admitted, &denied, &granted, &regions); err != nil {
			t.Fatal(err)
		}
		if want := wantMerged[fmt.Sprint(window.Unix(), rule)]; regions != want || tenant != "é" {
			t.Errorf("QueryRegionsMerged: %s %s %s merged %d regions, want %d", window, tenant, rule, regions, want)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(wantMerged) {
		t.Errorf("QueryRegionsMerged: %d lines, want %d", n, len(wantMerged))
	}
}
