package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/fleet"
	"github.com/allot-io/allot/ledger"
)

// Names of the coordinators' export metrics (coordinator/metrics.go).
const (
	mExported = "allot_coordinator_ledger_exported_lines_total"
	mErrors   = "allot_coordinator_ledger_export_errors_total"
	mPending  = "allot_coordinator_ledger_export_pending_lines"
	mLag      = "allot_coordinator_ledger_export_lag_seconds"
)

// coordinatorMetrics reads a member's /metrics into one number per
// series: name, and name/value for a series labelled result or cause
// (summed over any other label).
func coordinatorMetrics(ctx context.Context, c *fleet.Cluster, co *fleet.Coordinator) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, co.URL("/metrics"), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s metrics: %w", co.ID, err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	in := bufio.NewScanner(resp.Body)
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		name, labels, v, ok := parseSample(in.Text())
		if !ok {
			continue
		}
		if r := labels["result"]; r != "" {
			name += "/" + r
		} else if c := labels["cause"]; c != "" {
			name += "/" + c
		}
		m[name] += v
	}
	return m, in.Err()
}

// faultWatch is what a sink phase compares before and after: the checks
// that failed, each sidecar's reports answered and failed and checks
// decided on a fail mode (-1 when its metrics could not be read), and the
// export's lines and errors by cause summed over the members.
type faultWatch struct {
	loadErrors int64
	reports    [][3]float64
	exported   float64
	exportErrs map[string]float64
}

// watch reads a faultWatch now.
func (h *harness) watch(ctx context.Context, cl *client) faultWatch {
	w := faultWatch{loadErrors: cl.errors.Load(), exportErrs: map[string]float64{}}
	for _, s := range h.cl.Sidecars {
		sc, err := scrapeSidecar(ctx, h.cl.HTTP, s)
		if err != nil {
			w.reports = append(w.reports, [3]float64{-1, -1, -1})
			continue
		}
		w.reports = append(w.reports, [3]float64{sc.reportsOK, sc.reportsBad, sc.fallback})
	}
	for _, co := range h.cl.Coords {
		if !co.Running() || co.IsPaused() {
			continue
		}
		m, err := coordinatorMetrics(ctx, h.cl, co)
		if err != nil {
			continue
		}
		w.exported += m[mExported]
		for k, v := range m {
			if cause, ok := strings.CutPrefix(k, mErrors+"/"); ok {
				w.exportErrs[cause] += v
			}
		}
	}
	return w
}

// since is what changed from before to w. No member may restart between
// the two: the counters would start again from 0.
func (w faultWatch) since(before faultWatch) faultWatch {
	d := faultWatch{loadErrors: w.loadErrors - before.loadErrors, exported: w.exported - before.exported, exportErrs: map[string]float64{}}
	for i, r := range w.reports {
		b := before.reports[i]
		if r[0] < 0 || b[0] < 0 {
			d.reports = append(d.reports, [3]float64{-1, -1, -1})
			continue
		}
		d.reports = append(d.reports, [3]float64{r[0] - b[0], r[1] - b[1], r[2] - b[2]})
	}
	for k, v := range w.exportErrs {
		if n := v - before.exportErrs[k]; n != 0 {
			d.exportErrs[k] = n
		}
	}
	return d
}

func (w faultWatch) String() string {
	var reports []string
	fallback := 0.0
	for i, r := range w.reports {
		reports = append(reports, fmt.Sprintf("gw%d +%.0f/+%.0f", i+1, r[0], r[1]))
		fallback += max(r[2], 0)
	}
	return fmt.Sprintf("checks failed %d, decided on a fail mode %.0f; sidecar reports answered/failed %s; lines exported %.0f, export errors %s",
		w.loadErrors, fallback, strings.Join(reports, ", "), w.exported, causes(w.exportErrs))
}

// answeredGaps waits d, reading every sidecar's answered reports
// (allot_agent_reports_total{result="ok"}) every 250 ms, and returns per
// sidecar the longest time in which none was answered.
func (h *harness) answeredGaps(ctx context.Context, d time.Duration) ([]time.Duration, error) {
	n := len(h.cl.Sidecars)
	start := time.Now()
	end := start.Add(d)
	last, seen := make([]float64, n), make([]bool, n)
	since, longest := make([]time.Time, n), make([]time.Duration, n)
	for i := range since {
		since[i] = start
	}
	for {
		for i, s := range h.cl.Sidecars {
			sc, err := scrapeSidecar(ctx, h.cl.HTTP, s)
			if err != nil {
				continue
			}
			now := time.Now()
			if seen[i] && sc.reportsOK > last[i] {
				longest[i] = max(longest[i], now.Sub(since[i]))
				since[i] = now
			}
			last[i], seen[i] = sc.reportsOK, true
		}
		left := time.Until(end)
		if left <= 0 {
			break
		}
		if err := fleet.Sleep(ctx, min(left, 250*time.Millisecond)); err != nil {
			return nil, err
		}
	}
	for i := range longest {
		longest[i] = max(longest[i], time.Since(since[i]))
	}
	return longest, nil
}

// gapList writes answeredGaps' durations.
func gapList(gaps []time.Duration) string {
	var parts []string
	for i, g := range gaps {
		parts = append(parts, fmt.Sprintf("gw%d %.1fs", i+1, g.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// causes writes export errors by cause, in name order.
func causes(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// sinkLine summarises a leader's export metrics for the phase log.
func sinkLine(m map[string]float64) string {
	errs := map[string]float64{}
	for k, v := range m {
		if cause, ok := strings.CutPrefix(k, mErrors+"/"); ok {
			errs[cause] = v
		}
	}
	return fmt.Sprintf("sink: exported %.0f lines, pending %.0f, lag %.1fs, errors %s",
		m[mExported], m[mPending], m[mLag], causes(errs))
}

// sinkCatchUp waits, after the cooldown, until the export has caught up:
// the leader's backlog (allot_coordinator_ledger_export_pending_lines)
// seen empty for a second, or sinkCatchUpBatches batches committed since
// mark, the position when the last fault ended. Past its deadline the run
// fails: the export is stuck.
func (h *harness) sinkCatchUp(ctx context.Context, mark ledger.Position) {
	deadline := max(90*time.Second, 2*h.cfg.billingWindow)
	start := time.Now()
	var (
		zeroSince time.Time
		zeroOn    string
		why, how  string
		pos       ledger.Position
	)
	err := fleet.Poll(ctx, deadline, "the ledger export to catch up", func() (bool, error) {
		p, err := h.sink.position(ctx, h.cluster)
		if err == nil {
			pos = p
			if p.Batches >= mark.Batches+sinkCatchUpBatches {
				how = fmt.Sprintf("%d batches committed since the last fault", p.Batches-mark.Batches)
				return true, nil
			}
		}
		leader, _ := h.cl.FindLeader(ctx)
		if leader == nil {
			zeroSince, why = time.Time{}, "no leader"
			return false, nil
		}
		m, err := coordinatorMetrics(ctx, h.cl, leader)
		if err != nil {
			zeroSince, why = time.Time{}, err.Error()
			return false, nil
		}
		pending := m[mPending]
		why = fmt.Sprintf("leader %s: %s", leader.ID, sinkLine(m))
		switch {
		case pending != 0:
			zeroSince = time.Time{}
		case zeroSince.IsZero() || zeroOn != leader.ID:
			zeroSince, zeroOn = time.Now(), leader.ID
		case time.Since(zeroSince) >= time.Second:
			how = fmt.Sprintf("leader %s's backlog empty for a second", leader.ID)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		if ctx.Err() == nil {
			h.problem("the export did not catch up after the last fault: %v (last: %s; position %v, %v at the last fault)", err, why, pos, mark)
		}
		return
	}
	h.log.logf("sink: caught up in %.1fs: %s; position %v (%v at the last fault)", time.Since(start).Seconds(), how, pos, mark)
}
