package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/spawn"
)

// firstBins is how many of a key's first bins are reported on their own.
const firstBins = 3

// figures are one scenario's accuracy, as fractions of the limit.
type figures struct {
	// worst is the largest admitted ÷ limit of any key in any bin after
	// its warm-up; avg is admitted ÷ limit over the bins after the warm-up
	// where the key was offered more than its limit; under is the fraction
	// of those bins under 99.5%.
	worst, avg, under float64
	// first is the largest admitted ÷ limit of any key in each of its
	// first bins, from its first check.
	first [firstBins]float64
	bins  int // bins in avg
	ok    bool
}

// tally adds one bin.
type tally struct {
	f          figures
	adm, limit float64
	under      int
}

func (t *tally) add(offered, admitted, limit float64, pos int, warmBins int) {
	r := admitted / limit
	if pos < firstBins {
		t.f.first[pos] = max(t.f.first[pos], r)
	}
	if pos < warmBins {
		return
	}
	t.f.worst = max(t.f.worst, r)
	if offered > limit {
		t.adm += admitted
		t.limit += limit
		t.f.bins++
		if r < 0.995 {
			t.under++
		}
	}
}

func (t *tally) done() figures {
	if t.f.bins > 0 {
		t.f.avg = t.adm / t.limit
		t.f.under = float64(t.under) / float64(t.f.bins)
		t.f.ok = true
	}
	return t.f
}

// measureReal reads the generator's bins: for each key, the whole bins
// from its first check to its last (or the end of the load), as streams
// (the scenario's, or their copies running until an event is over) sent.
func measureReal(c *counts, s *scenario, streams []*stream, begin time.Time, end time.Duration) figures {
	c.mu.Lock()
	defer c.mu.Unlock()
	limit := float64(s.limitOf())
	var t tally
	seen := map[string]bool{}
	for _, st := range streams {
		if seen[st.Key] {
			continue // streams sharing a global key are measured once
		}
		seen[st.Key] = true
		w := st.Bin.Nanoseconds()
		first := begin.Add(st.Start).UnixNano() / w
		last := begin.Add(min(st.Stop, end)).UnixNano()/w - 1 // the last whole bin
		warm := int(math.Ceil(float64(s.warmup) / float64(st.Bin)))
		for i := first; i <= last; i++ {
			b := c.bins[binKey{st.Key, i}]
			if b == nil {
				b = &bin{}
			}
			t.add(float64(b.offered), float64(b.admitted), limit, int(i-first), warm)
		}
	}
	return t.done()
}

// simYAML is an `allot sim` scenario with the real scenario's fleet,
// offered rate, rule, duration and warm-up.
func simYAML(s *scenario, nodes int, interval time.Duration) string {
	tenants, rate := len(s.streams), s.offeredRate()
	duration, warmup, arrival := s.duration, s.warmup, ""
	if ev := s.sim; ev.arrival > 0 {
		// Every tenant at its stream's rate, arriving in turn after a
		// tenant of the warm-up's own.
		tenants++
		rate = float64(tenants) * s.streams[0].Rate
		duration, warmup = ev.lead+s.duration, ev.lead
		arrival = fmt.Sprintf(", arrival: %s", ev.arrival)
	}
	yaml := fmt.Sprintf(`name: %s
description: tools/accuracy's %s scenario with %d sidecars, for the real processes' figures.
nodes: %d
duration: %s
warmup: %s
interval: %s
rate: %g
seed: 1
rule: {algorithm: %s, limit: %d, period: %s, burst: %d, scope: %s, intent: %s}
tenants: {count: %d%s}
`, s.name, s.name, nodes, nodes, duration, warmup, interval, rate,
		s.rule.Algorithm, s.rule.Limit, s.rule.Period, s.rule.Burst, s.rule.Scope, s.rule.Intent, tenants, arrival)
	var events []string
	if s.sim.failoverAt > 0 {
		events = append(events, fmt.Sprintf("  - {at: %s, failover: true}\n", s.sim.failoverAt))
	}
	for i, at := range s.sim.restarts {
		events = append(events, fmt.Sprintf("  - {at: %s, restart: {node: %d}}\n", at, i))
	}
	if len(events) > 0 {
		yaml += "events:\n" + strings.Join(events, "")
	}
	return yaml
}

// runSim runs the comparable simulation with the same allot binary and
// measures its quota-lease windows as the real ones are: per window of
// the rule's period (a second for rate algorithms), after the warm-up.
func runSim(ctx context.Context, bin, dir string, s *scenario, nodes int, interval time.Duration) (figures, error) {
	path := filepath.Join(dir, fmt.Sprintf("sim-%s-%d.yaml", s.name, nodes))
	if err := os.WriteFile(path, []byte(simYAML(s, nodes, interval)), 0o600); err != nil {
		return figures{}, fmt.Errorf("writing %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "sim", "--scenario", path, "--strategies", "quota-lease", "--format", "csv", "--progress", "off")
	cmd.Env = spawn.Env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return figures{}, fmt.Errorf("allot sim --scenario %s: %w: %s", path, err, bytes.TrimSpace(errb.Bytes()))
	}
	rows, err := csv.NewReader(&out).ReadAll()
	if err != nil || len(rows) < 2 {
		return figures{}, fmt.Errorf("reading allot sim's CSV: %v (%d rows)", err, len(rows))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, h := range []string{"window_start_s", "offered", "admitted", "limit", "peak_tenant_over_limit"} {
		if _, ok := col[h]; !ok {
			return figures{}, fmt.Errorf("allot sim's CSV has no column %q", h)
		}
	}
	num := func(row []string, h string) float64 {
		v, _ := strconv.ParseFloat(row[col[h]], 64)
		return v
	}
	var t tally
	period := binOf(s.rule).Seconds()
	warmup := s.warmup
	if s.sim.arrival > 0 {
		warmup = s.sim.lead // each later tenant counts from its arrival, as the real ones do
	}
	warm := int(math.Ceil(warmup.Seconds() / period))
	for _, row := range rows[1:] {
		pos := int(math.Round(num(row, "window_start_s") / period))
		limit, adm := num(row, "limit"), num(row, "admitted")
		// The fleet's admitted ÷ limit, but the worst key's peak: the same
		// for one tenant or a global rule.
		t.add(num(row, "offered"), adm, limit, pos, warm)
		if pos >= warm {
			t.f.worst = max(t.f.worst, num(row, "peak_tenant_over_limit"))
		} else if pos < firstBins {
			t.f.first[pos] = max(t.f.first[pos], num(row, "peak_tenant_over_limit"))
		}
	}
	return t.done(), nil
}
