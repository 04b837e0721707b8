package main

import (
	"context"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/fleet"
)

// shortConfig is the run TestFleetShort makes: 10 gateways × 200
// tenants at 200 checks/s each, 20 s of load, a line every 5 s.
func shortConfig() config {
	cfg := defaultConfig()
	cfg.gateways, cfg.tenants, cfg.rate = 10, 200, 200
	cfg.duration, cfg.warmup, cfg.every = 20*time.Second, 5*time.Second, 5*time.Second
	cfg.workers = 2
	cfg.timeout = 4 * time.Minute
	return cfg
}

// TestFleetShort runs the harness small, against real coordinator
// processes, and checks its own accounting rather than the fleet's
// figures (which the machine's other work moves): a line for every
// interval, each check counted once as admitted or refused by some rule,
// the agents' reports and the leader's figures read, the generator
// offering its load, and a summary with every target.
func TestFleetShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three allot processes and ten agents for about 30 s")
	}
	// FLEET_FLAGS adds flags, e.g. FLEET_FLAGS='-allot /tmp/allot'.
	cfg, err := parseFlags(strings.Fields(os.Getenv("FLEET_FLAGS")), io.Discard, shortConfig())
	if err != nil {
		t.Fatalf("FLEET_FLAGS: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var out strings.Builder
	w := &fleet.LineWriter{Line: func(s string) {
		t.Log(s)
		mu.Lock()
		out.WriteString(s + "\n")
		mu.Unlock()
	}}
	results, _, err := run(ctx, cfg, w)
	if err != nil {
		t.Fatalf("fleet run: %v", err)
	}
	if len(results) != 1 {
		t.Fatalf("%d results, want 1", len(results))
	}
	res := results[0]
	// A line per interval, unless reading the figures took longer than
	// one (the machine's other work can make it): the lines cover the
	// run either way, and each was printed.
	if len(res.lines) < 2 || len(res.lines) > int(cfg.duration/cfg.every) {
		t.Fatalf("%d lines, want %d", len(res.lines), cfg.duration/cfg.every)
	}
	if last := res.lines[len(res.lines)-1].at; last < cfg.duration-cfg.every/2 {
		t.Errorf("the last line at %v, want %v", last, cfg.duration)
	}
	leaders := 0
	var paced, span float64
	for i, l := range res.lines {
		c := l.counts
		refused := int64(0)
		for _, n := range c.refused {
			refused += n
		}
		if c.offered <= 0 || c.admitted+refused != c.offered {
			t.Errorf("line %d: %d offered, %d admitted and %d refused", i+1, c.offered, c.admitted, refused)
		}
		if l.reportsOK+l.reportsFailed <= 0 || len(l.lat) == 0 {
			t.Errorf("line %d: no reports read (%v ok, %v failed, %d calls timed)", i+1, l.reportsOK, l.reportsFailed, len(l.lat))
		}
		paced += float64(c.offered + c.dropped)
		span += l.span.Seconds()
		if l.leader != "-" && !math.IsNaN(l.rss) {
			leaders++
		}
		if got := len(strings.Fields(l.format())); got != len(strings.Fields(header())) {
			t.Errorf("line %d has %d fields, the header %d: %q", i+1, got, len(strings.Fields(header())), l.format())
		}
	}
	// Every check due was offered, or dropped by a generator that fell
	// behind (the machine's other work can starve it; it says so).
	if want := cfg.rate * float64(cfg.gateways) * span; math.Abs(paced-want) > 0.1*want {
		t.Errorf("%.0f checks offered or dropped in %.1fs, want %.0f", paced, span, want)
	}
	printed := out.String()
	for i, l := range res.lines {
		if !strings.Contains(printed, l.format()) {
			t.Errorf("line %d was not printed: %q", i+1, l.format())
		}
	}
	if leaders == 0 {
		t.Error("no line found the leader")
	}
	if res.lines[0].measured || !res.lines[len(res.lines)-1].measured {
		t.Error("the warm-up is not the first line alone")
	}
	for _, want := range []string{header(), "SUMMARY 10 gateways × 200 tenants", "reports answered within the interval", "lease expiries at agents",
		"refusals only where a rule really binds", "leader RSS, last quarter", "report calls: p50"} {
		if !strings.Contains(printed, want) {
			t.Errorf("the output has no %q", want)
		}
	}
}
