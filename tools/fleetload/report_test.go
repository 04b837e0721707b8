package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestSummary sums hand-made lines: the warm-up left out, the leader's
// memory compared within the last leader's lines alone, and the
// overload's recovery counted in report intervals from the drop back.
func TestSummary(t *testing.T) {
	res := &result{p: defaultConfig().point}
	res.p.overload, res.p.overloadFor = 3, 20*time.Second
	for i := range 20 {
		l := line{at: time.Duration(i+1) * 10 * time.Second, span: 10 * time.Second, measured: i > 0, leader: "c1",
			reportsOK: 100, rss: 100 << 20, goroutines: 50, cpu: nan, shed: nan, leaderReports: nan, entries: nan}
		if i >= 10 {
			l.leader, l.rss, l.goroutines = "c2", float64(200+i)*(1<<20), 80 // a new leader, growing 0.5% a line
		}
		if i == 10 {
			l.changed = true
		}
		if i == 0 {
			l.reportsFailed = 100 // in the warm-up: left out
		}
		res.lines = append(res.lines, l)
	}
	f := res.sum()
	if f.lines != 19 || f.reportsFail != 0 || len(f.rss) != 10 {
		t.Fatalf("%d lines, %v failed, %d RSS readings of the last leader", f.lines, f.reportsFail, len(f.rss))
	}
	res.overOn, res.overOff = 100*time.Second, 120*time.Second
	res.seconds = make([]second, 200)
	for s := range res.seconds {
		res.seconds[s] = second{calls: 100, inTime: 100}
		if s >= 110 && s < 124 { // late from the overload until 4 s after the drop
			res.seconds[s].inTime = 50
		}
	}
	byName := map[string]target{}
	for _, tg := range res.targets(f) {
		byName[strings.SplitN(tg.name, ",", 2)[0]] = tg
	}
	for name, want := range map[string]string{"reports answered within the interval": "PASS", "leader RSS": "PASS",
		"leader goroutines": "PASS", "recovery after ×3 for 20s": "MISS"} {
		if got := byName[name].mark(); got != want {
			t.Errorf("%s: %s (%s), want %s", name, got, byName[name].got, want)
		}
	}
	if got := byName["recovery after ×3 for 20s"].got; !strings.HasPrefix(got, "4 intervals") {
		t.Errorf("recovery %q, want 4 intervals", got)
	}
	if q := quantile([]float64{1, 2, 3, 4}, 0.5); q != 2 || !math.IsNaN(quantile(nil, 0.5)) {
		t.Errorf("quantile %v", q)
	}
}
