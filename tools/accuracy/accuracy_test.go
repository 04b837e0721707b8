package main

import (
	"context"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/fleet"
	"github.com/allot-io/allot/sim"
)

// shortConfig is the short version `make test` runs: the steady fixed
// window and token bucket quotas on 3 sidecars, about 45 s of load.
func shortConfig() config {
	cfg := defaultConfig()
	cfg.fleets = []int{3}
	cfg.only = regexp.MustCompile(`^steady-(fixed_window|token_bucket)$`)
	cfg.timeout = 4 * time.Minute
	return cfg
}

// TestAccuracyShort runs real allot processes and asserts what they meet
// reliably, with a margin: measured on this 2-core machine, worst 100.3%
// and average 100.0% for both quotas (docs/accuracy.md, "Real
// processes"), and worst 100.0–100.3% with stress-ng --cpu 2 beside it.
// It asserts worst ≤ 105%: the hand-over guard keeps a window's leases
// within the limit plus the quota's 5% tolerance, which bounds what the
// window admits as long as every sidecar changes windows when the
// coordinators do. It failed in CI at 107.3% when the sidecars' clocks
// ran up to 125 ms ahead (half the leader's wait for its allocation
// round, taken for network delay: agent.TestClockObserve). It asserts
// average ≥ 99% (0.5 points under the 99.5% target: under `go test
// ./...` other packages' tests share the cores with the fleet).
func TestAccuracyShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six allot processes for about a minute")
	}
	// ACCURACY_FLAGS adds flags, e.g. ACCURACY_FLAGS='-allot /tmp/allot'.
	cfg, err := parseFlags(strings.Fields(os.Getenv("ACCURACY_FLAGS")), io.Discard, shortConfig())
	if err != nil {
		t.Fatalf("ACCURACY_FLAGS: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rows, err := run(ctx, cfg, &fleet.LineWriter{Line: func(s string) { t.Log(s) }})
	t.Logf("\n%s", table(rows))
	if err != nil {
		t.Fatalf("accuracy run: %v", err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d scenarios measured, want 2", len(rows))
	}
	for _, r := range rows {
		if r.real.worst > 1.05 {
			t.Errorf("%s: worst %s of the limit, want at most 105%%", r.s.name, pct(r.real.worst))
		}
		if !r.real.ok || r.real.avg < 0.99 {
			t.Errorf("%s: average %s of the limit (%d bins), want at least 99%%", r.s.name, pct(r.real.avg), r.real.bins)
		}
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-sidecars", "3, 10", "-scenarios", "^steady", "-strict"}, io.Discard, defaultConfig())
	if err != nil || len(cfg.fleets) != 2 || cfg.fleets[1] != 10 || !cfg.strict || !cfg.only.MatchString("steady-gcra") {
		t.Fatalf("parseFlags: %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{{"-sidecars", "0"}, {"-scenarios", "("}, {"-steady", "1s"}} {
		if _, err := parseFlags(bad, io.Discard, defaultConfig()); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestMeasure checks the figures on hand-made bins: the warm-up and
// partial bins are left out, the first bins are reported on their own.
func TestMeasure(t *testing.T) {
	s := scenarios(defaultConfig().settings, 3)[1] // steady-token_bucket: 1 s bins
	s.warmup = 2 * time.Second
	st := s.streams[0]
	begin := time.Unix(1000, 0)
	c := &counts{bins: map[binKey]*bin{}}
	for i, adm := range []int64{1200, 700, 600, 630, 590, 600} {
		*c.at(binKey{st.Key, 1000 + int64(i)}) = bin{offered: 1200, admitted: adm}
	}
	f := measureReal(c, s, s.streams, begin, 6*time.Second)
	if f.bins != 4 || f.worst != 1.05 || f.first[0] != 2 {
		t.Errorf("figures %+v", f)
	}
	if want := (600.0 + 630 + 590 + 600) / 2400; f.avg != want || f.under != 0.25 {
		t.Errorf("avg %v under %v, want %v and 0.25", f.avg, f.under, want)
	}
}

// TestSimYAML: every scenario with a simulator counterpart writes one the
// simulator accepts, with the same fleet and rule, the rolling deploy's
// restarts and the new tenants' arrivals.
func TestSimYAML(t *testing.T) {
	for _, n := range []int{3, 10} {
		for _, s := range scenarios(defaultConfig().settings, n) {
			if s.sim == nil {
				continue
			}
			sc, err := sim.Parse(s.name, []byte(simYAML(s, n, time.Second)))
			if err != nil {
				t.Errorf("%s, %d sidecars: %v", s.name, n, err)
				continue
			}
			if sc.Nodes != n || sc.Rule.Limit != s.rule.Limit {
				t.Errorf("%s: simulator runs %d nodes and a limit of %d; want %d and %d", s.name, sc.Nodes, sc.Rule.Limit, n, s.rule.Limit)
			}
			restarts := 0
			for _, e := range sc.Events {
				if e.Restart != nil {
					restarts++
				}
			}
			if s.name == "rolling-deploy" && restarts != n {
				t.Errorf("rolling-deploy: %d restarts in the simulator; want every one of %d nodes", restarts, n)
			}
			if s.name == "new-tenants" && sc.Tenants.Arrival != 4*time.Second {
				t.Errorf("new-tenants: arrival %v in the simulator; want 4s", sc.Tenants.Arrival)
			}
		}
	}
}
