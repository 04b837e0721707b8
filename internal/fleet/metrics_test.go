package fleet

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

const page = `# HELP allot_coordinator_reports_total Agent reports received.
# TYPE allot_coordinator_reports_total counter
allot_coordinator_reports_total{result="ok"} 120
allot_coordinator_reports_total{result="failed"} 3
go_goroutines 57
allot_coordinator_allocation_round_duration_seconds_bucket{le="0.001"} 10
allot_coordinator_allocation_round_duration_seconds_bucket{le="0.01"} 90
allot_coordinator_allocation_round_duration_seconds_bucket{le="0.1"} 100
allot_coordinator_allocation_round_duration_seconds_bucket{le="+Inf"} 100
allot_coordinator_allocation_round_duration_seconds_sum 0.5
allot_coordinator_allocation_round_duration_seconds_count 100
allot_coordinator_raft_state{state="Leader"} 1
allot_coordinator_raft_state{state="Follower"} 0
`

// TestMetricsByName reads a page by name and labels: sums over the
// series that match, an absent series as 0, histograms and their
// quantiles, and a histogram's difference between two readings.
func TestMetricsByName(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"allot_coordinator_reports_total", nil, 123},
		{"allot_coordinator_reports_total", []string{"result", "ok"}, 120},
		{"allot_coordinator_reports_total", []string{"result", "shed"}, 0},
		{"go_goroutines", nil, 57},
		{"allot_coordinator_raft_state", []string{"state", "Leader"}, 1},
		{"no_such_metric", nil, 0},
	} {
		if got := m.Sum(tc.name, tc.labels...); got != tc.want {
			t.Errorf("Sum(%s, %q) = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if m.Has("no_such_metric") || !m.Has("allot_coordinator_allocation_round_duration_seconds") {
		t.Error("Has tells present from absent wrongly")
	}
	if got := m.Values("allot_coordinator_reports_total", "result"); strings.Join(got, ",") != "failed,ok" {
		t.Errorf("Values = %q", got)
	}
	h := m.Histogram("allot_coordinator_allocation_round_duration_seconds")
	if h.Count != 100 || h.Mean() != 0.005 {
		t.Fatalf("histogram %+v", h)
	}
	// The median falls in (0.001, 0.01], 40 of its 80: 0.001 + 0.009 × 40/80.
	if got := h.Quantile(0.5); math.Abs(got-0.0055) > 1e-12 {
		t.Errorf("p50 %v, want 0.0055", got)
	}
	if got := h.Quantile(0.99); math.Abs(got-(0.01+0.09*0.9)) > 1e-12 {
		t.Errorf("p99 %v, want 0.091", got)
	}
	prev := Histogram{Bounds: h.Bounds, Counts: []float64{10, 50, 50, 50}, Sum: 0.1, Count: 50}
	d := h.Sub(prev)
	if d.Count != 50 || d.Counts[0] != 0 || d.Counts[2] != 50 || math.Abs(d.Sum-0.4) > 1e-12 {
		t.Errorf("difference %+v", d)
	}
	if s := d.Add(prev); s.Count != 100 || s.Counts[1] != 90 {
		t.Errorf("sum %+v", s)
	}
	if !math.IsNaN(m.Histogram("no_such").Quantile(0.5)) {
		t.Error("an absent histogram has a quantile")
	}
}

// TestGather reads an in-process registry as a scrape of it would read.
func TestGather(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"result"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "d_seconds", Help: "d", Buckets: []float64{0.1, 1}})
	reg.MustRegister(c, h)
	c.WithLabelValues("ok").Add(3)
	for _, v := range []float64{0.05, 0.5, 5} {
		h.Observe(v)
	}
	m, err := Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	hist := m.Histogram("d_seconds")
	if m.Sum("x_total", "result", "ok") != 3 || hist.Count != 3 || len(hist.Bounds) != 3 || hist.Counts[1] != 2 {
		t.Errorf("x_total %v, histogram %+v", m.Sum("x_total", "result", "ok"), hist)
	}
}

// TestReadProcStat reads this process.
func TestReadProcStat(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	ps, err := ReadProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if ps.RSS < 1<<20 || ps.CPU < 0 {
		t.Errorf("%+v", ps)
	}
	if _, err := ReadProcStat(0); err == nil {
		t.Error("pid 0 read")
	}
}
