package state

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/allot-io/allot/ledger"
)

// TestTenantUsage: the walk reads one tenant's lines in the windows asked
// for (minute windows here), whichever tenants sort around it, from
// bounds on a window or between two, across windows the ledger does not
// hold and windows where the tenant has none.
func TestTenantUsage(t *testing.T) {
	s := New()
	s.billingWindow = int64(time.Minute)
	put := func(w int64, tenant, rule, region string, admitted uint64) {
		s.ledger.ReplaceOrInsert(lineItem{key: ledger.Key{Window: w, Tenant: tenant, Rule: rule, Region: region}, u: usage{admitted: admitted}})
	}
	for _, w := range []int64{0, 60, 120, 3600, 7200} {
		put(w, "aaa", "q", "eu", 1000)
		put(w, "acme", "q", "eu", 1)
		put(w, "acme", "q", "us", 2)
		put(w, "acme", "r", "eu", 4)
		put(w, "acmez", "q", "eu", 1000)
		put(w, "zzz", "q", "eu", 1000)
	}
	put(180, "initech", "q", "eu", 1000) // a window without acme
	for _, tc := range []struct {
		from, to int64
		want     string
	}{
		{math.MinInt64, math.MaxInt64, "q=15 r=20 lines=15"},
		{0, 3600, "q=9 r=12 lines=9"},
		{61, 3601, "q=6 r=8 lines=6"},
		{7201, math.MaxInt64, "q=0 r=0 lines=0"},
		{121, 3600, "q=0 r=0 lines=0"},
	} {
		sums, lines := map[string]uint64{}, 0
		s.TenantUsage("acme", tc.from, tc.to, func(rule string, window int64, admitted uint64) {
			if window < tc.from || window >= tc.to {
				t.Errorf("[%d, %d): a line of window %d", tc.from, tc.to, window)
			}
			sums[rule] += admitted
			lines++
		})
		if got := fmt.Sprintf("q=%d r=%d lines=%d", sums["q"], sums["r"], lines); got != tc.want {
			t.Errorf("[%d, %d): %s, want %s", tc.from, tc.to, got, tc.want)
		}
	}
}

// TestFinalAndOpenIn: the final windows of a range are counted, and its
// open windows listed once each, past their reporters.
func TestFinalAndOpenIn(t *testing.T) {
	s := New()
	for _, w := range []int64{0, 60, 240} {
		s.final.ReplaceOrInsert(w)
	}
	for _, w := range []int64{120, 180, 300} {
		s.openWindow(w)
		for node := range 3 {
			insertIfAbsent(s.open, openItem{window: w, reporter: incKey{node: fmt.Sprint("gw-", node), incarnation: 1}})
		}
	}
	for _, tc := range []struct {
		from, to int64
		finals   int
		open     string
	}{
		{0, 360, 3, "[120 180 300]"},
		{60, 300, 2, "[120 180]"},
		{181, 240, 0, "[]"},
		{math.MinInt64, math.MaxInt64, 3, "[120 180 300]"},
	} {
		if _, last := s.FinalIn(tc.from, tc.to); tc.finals > 0 && last != map[int64]int64{0: 240, 60: 240, math.MinInt64: 240}[tc.from] {
			t.Errorf("[%d, %d): last final window %d", tc.from, tc.to, last)
		}
		var open []int64
		s.OpenIn(tc.from, tc.to, func(w int64) { open = append(open, w) })
		if n, _ := s.FinalIn(tc.from, tc.to); n != tc.finals || fmt.Sprint(open) != tc.open {
			t.Errorf("[%d, %d): %d final, open %v; want %d and %s", tc.from, tc.to, n, open, tc.finals, tc.open)
		}
	}
}
