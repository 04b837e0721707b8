package main

import (
	"context"
	"github.com/allot-io/allot/internal/fleet"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// shortConfig is the short run for `make test`: one leader kill, one short
// pause, a short full outage, a short flood of new tenants and the hostile
// inputs, in about a minute of traffic.
func shortConfig() config {
	cfg := defaultConfig()
	cfg.timeout = 5 * time.Minute
	cfg.workers, cfg.rate = 8, 600
	cfg.warmup, cfg.cooldown = 4*time.Second, 4*time.Second
	cfg.kills, cfg.killDown, cfg.killGap = 1, 2*time.Second, 3*time.Second
	cfg.pauses, cfg.pause, cfg.pauseGap = 1, 3*time.Second, 3*time.Second
	cfg.outage, cfg.outageRecover = 8*time.Second, 5*time.Second
	cfg.flood = 10_000
	cfg.maxLines = 25
	cfg.storage = storageConfig{}
	// Ten-second windows: final lines for the sink every few seconds, so
	// that sink-kill-mid-tx soon finds an export to block.
	cfg.billingWindow = 10 * time.Second
	cfg.sink.down, cfg.sink.pause = 5*time.Second, 4*time.Second
	return cfg
}

// storageConfig is the short run of the storage phases alone: a damaged
// and a truncated raft.db, a damaged snapshot, the leader's disk lost
// while the others are stopped, a full disk (as root), and a quorum lost
// for good, under a light load.
func storageShortConfig() config {
	cfg := shortConfig()
	cfg.timeout = 7 * time.Minute
	cfg.kills, cfg.pauses, cfg.outage, cfg.flood, cfg.hostile, cfg.envoys = 0, 0, 0, 0, false, 0
	cfg.killGap = 2 * time.Second
	cfg.storage = allStorage()
	cfg.storage.lostDiskHold, cfg.storage.fullHold = 8*time.Second, 5*time.Second
	// The sink exports through the storage phases; its own phases are
	// TestChaosShort's.
	cfg.sink.killMidTx, cfg.sink.down, cfg.sink.pause, cfg.restartMember = false, 0, 0, false
	return cfg
}

// soakShortConfig is the soak's short run for make test: four minutes,
// the leader killed twice, every process sampled every two seconds. It
// is not shorter because a run of a process is judged only from
// minJudged (100 s, the ledger's way to its steady state): four minutes
// with two kills leave most processes a run that long.
func soakShortConfig() config {
	cfg := shortConfig()
	cfg.soak = soakConfig{duration: 4 * time.Minute, killEvery: 100 * time.Second, every: 2 * time.Second, snapshotThreshold: 1024}
	cfg.envoys = 0
	return cfg
}

// TestSoakShort runs the soak briefly: every process sampled, the leader
// killed twice, every series levelling off and the ledger exact.
// TestChaosShort, TestChaosStorageShort and it run side by side, two at a
// time (go test's -parallel), it first, being the longest (declared
// first: go test starts parallel tests in that order): their phases are timed, so each takes as
// long alone, and they judge what was admitted, billed and leaked, not
// how fast. Alone under -race they used 60-80 s of CPU in 80-95 s, 50 s in
// 65 s, and 240 s in 250 s.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs six allot processes for four minutes")
	}
	t.Parallel() // its own processes, ports and directories
	cfg, err := parseFlags(strings.Fields(os.Getenv("CHAOS_FLAGS")), io.Discard, soakShortConfig())
	if err != nil {
		t.Fatalf("CHAOS_FLAGS: %v", err)
	}
	h := newHarness(cfg, &fleet.LineWriter{Line: func(s string) { t.Log(s) }})
	t.Cleanup(h.close)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if _, err := h.run(ctx); err != nil {
		t.Fatalf("soak run: %v", err)
	}
	if !h.passed {
		t.Errorf("the soak failed (see the log above): %s", strings.Join(h.failedBy, "; "))
	}
}

// TestChaosShort runs the harness's short version against real allot
// processes: the ledger must equal, per tenant and rule, what the
// sidecars answered.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six allot processes for about a minute")
	}
	t.Parallel() // its own processes, ports, directories and database
	// CHAOS_FLAGS adds flags, e.g. CHAOS_FLAGS='-allot /tmp/allot -hostile=false'.
	cfg, err := parseFlags(strings.Fields(os.Getenv("CHAOS_FLAGS")), io.Discard, shortConfig())
	if err != nil {
		t.Fatalf("CHAOS_FLAGS: %v", err)
	}
	h := newHarness(cfg, &fleet.LineWriter{Line: func(s string) { t.Log(s) }})
	t.Cleanup(h.close)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if _, err := h.run(ctx); err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	if !h.passed {
		t.Errorf("the chaos run failed (see the log above): %s", strings.Join(h.failedBy, "; "))
	}
}

// TestChaosStorageShort runs the storage phases against real allot
// processes: each must refuse, fall back or rejoin as the runbook says,
// and the ledger must equal what the sidecars answered (less at most what
// the lost quorum's survivor never received).
func TestChaosStorageShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six allot processes for about two minutes")
	}
	t.Parallel() // its own processes, ports, directories and database
	cfg, err := parseFlags(strings.Fields(os.Getenv("CHAOS_FLAGS")), io.Discard, storageShortConfig())
	if err != nil {
		t.Fatalf("CHAOS_FLAGS: %v", err)
	}
	h := newHarness(cfg, &fleet.LineWriter{Line: func(s string) { t.Log(s) }})
	t.Cleanup(h.close)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if _, err := h.run(ctx); err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	if !h.passed {
		t.Errorf("the storage run failed (see the log above): %s", strings.Join(h.failedBy, "; "))
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-kills", "0", "-outage", "0", "-long-tenant-sidecar", "1"}, io.Discard, defaultConfig())
	if err != nil || cfg.kills != 0 || cfg.outage != 0 || cfg.longTenantSidecar != 1 || cfg.rate != defaultConfig().rate {
		t.Fatalf("parseFlags: %+v, %v", cfg, err)
	}
	if _, err := parseFlags([]string{"-long-tenant-sidecar", "4"}, io.Discard, defaultConfig()); err == nil {
		t.Error("-long-tenant-sidecar 4 accepted")
	}
}

// TestParseSinkFlags: the sink is on by default, required (a missing
// PostgreSQL fails the run) when asked for by name or by ALLOT_PG_TESTS=1,
// and left out of the soak.
func TestParseSinkFlags(t *testing.T) {
	for _, tc := range []struct {
		name         string
		args         []string
		env          string
		on, required bool
		err          bool
	}{
		{name: "default", on: true},
		{name: "given", args: []string{"-sink"}, on: true, required: true},
		{name: "off", args: []string{"-sink=false"}},
		{name: "off even if required by the environment", args: []string{"-sink=false"}, env: "1"},
		{name: "required by the environment", env: "1", on: true, required: true},
		{name: "the soak leaves it out", args: []string{"-soak", "1m"}, env: "1"},
		{name: "the soak refuses it by name", args: []string{"-soak", "1m", "-sink"}, err: true},
		{name: "a batch of 0", args: []string{"-sink-batch", "0"}, on: true, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(pgRequireEnv, tc.env)
			cfg, err := parseFlags(tc.args, io.Discard, defaultConfig())
			if (err != nil) != tc.err {
				t.Fatalf("parseFlags(%q): %v; want an error: %v", tc.args, err, tc.err)
			}
			if err == nil && (cfg.sink.on != tc.on || cfg.sink.required != tc.required) {
				t.Errorf("parseFlags(%q) with %s=%q: sink on %v, required %v; want %v, %v", tc.args, pgRequireEnv, tc.env, cfg.sink.on, cfg.sink.required, tc.on, tc.required)
			}
		})
	}
}

func TestMatches(t *testing.T) {
	rs := newRuleSet(chaosRules())
	has := func(m uint64, name string) bool { return m&(1<<rs.index[name]) != 0 }
	m := rs.matching("a", "free", "/v1/export/csv")
	if !has(m, "export-route") || has(m, "search-bucket") || !has(m, "api-capacity") {
		t.Errorf("free export: %b", m)
	}
	if m := rs.matching("a", "pro", "/v1/export/csv"); has(m, "export-route") {
		t.Errorf("pro export matched the free-plan rule: %b", m)
	}
	if m := rs.matching("a", "pro", "/v1/search?q=1"); !has(m, "search-bucket") {
		t.Errorf("search: %b", m)
	}
}

func TestLevels(t *testing.T) {
	ramp := func(n int, f func(i int) float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		vals  []float64
		limit float64
		slack float64
		ok    bool
	}{
		{"flat", ramp(40, func(int) float64 { return 100 }), 1.25, 0, true},
		{"warms up, then flat", ramp(40, func(i int) float64 { return 100 + 50*min(float64(i), 8)/8 }), 1.25, 0, true},
		{"noisy but flat", ramp(40, func(i int) float64 { return 100 + float64(i%5) }), 1.25, 0, true},
		{"doubles", ramp(40, func(i int) float64 { return 100 + 10*float64(i) }), 1.25, 0, false},
		{"grows within the slack", ramp(40, func(i int) float64 { return 10 + float64(i)/4 }), 1.25, 20, true},
		{"too few samples", []float64{1, 2, 3}, 1.25, 0, true},
	} {
		if _, ok := levels(tc.vals, tc.limit, tc.slack); ok != tc.ok {
			t.Errorf("%s: levels = %v, want %v", tc.name, ok, tc.ok)
		}
	}
}
