package fleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Sample is one series of a metrics page: a name, its labels, a value.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Metrics are the series of one scrape, read by name and labels. A
// harness reads them so, and not by position, so that it keeps working
// as metrics are added and removed: a series that is absent reads as 0,
// and Has tells the two apart where that matters.
type Metrics struct {
	byName map[string][]Sample
}

// ParseMetrics reads a page of the Prometheus text format. Comment lines
// and lines that are no sample are skipped.
func ParseMetrics(r io.Reader) (Metrics, error) {
	m := Metrics{byName: map[string][]Sample{}}
	in := bufio.NewScanner(r)
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		if s, ok := parseSample(in.Text()); ok {
			m.add(s)
		}
	}
	if err := in.Err(); err != nil {
		return m, fmt.Errorf("reading metrics: %w", err)
	}
	return m, nil
}

func (m *Metrics) add(s Sample) { m.byName[s.Name] = append(m.byName[s.Name], s) }

// parseSample reads one line of the text format: name{k="v",…} value
// [timestamp]. Label values holding commas or escaped quotes are not
// needed by any harness and are read as far as the first comma.
func parseSample(line string) (Sample, bool) {
	if line == "" || line[0] == '#' {
		return Sample{}, false
	}
	var s Sample
	head, val := line, ""
	if i := strings.LastIndexByte(line, '}'); i >= 0 {
		head, val = line[:i+1], strings.TrimSpace(line[i+1:])
	} else if h, v, ok := strings.Cut(line, " "); ok {
		head, val = h, strings.TrimSpace(v)
	} else {
		return s, false
	}
	f := strings.Fields(val)
	if len(f) == 0 {
		return s, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, false
	}
	s.Value = v
	name, rest, hasLabels := strings.Cut(head, "{")
	s.Name = name
	if hasLabels {
		s.Labels = map[string]string{}
		for kv := range strings.SplitSeq(strings.TrimSuffix(rest, "}"), ",") {
			if k, lv, ok := strings.Cut(kv, "="); ok {
				s.Labels[strings.TrimSpace(k)] = strings.Trim(lv, `"`)
			}
		}
	}
	return s, s.Name != ""
}

// Has reports whether the page has any series of the metric; a histogram
// is named by its base name.
func (m Metrics) Has(name string) bool {
	return len(m.byName[name]) > 0 || len(m.byName[name+"_count"]) > 0
}

// Sum adds up the series of the metric whose labels match: labels are
// pairs of a name and a value. It is 0 when none does.
func (m Metrics) Sum(name string, labels ...string) float64 {
	sum := 0.0
	for _, s := range m.byName[name] {
		if matches(s.Labels, labels) {
			sum += s.Value
		}
	}
	return sum
}

// Values are the values of a label among the metric's series, sorted.
func (m Metrics) Values(name, label string) []string {
	var out []string
	for _, s := range m.byName[name] {
		if v, ok := s.Labels[label]; ok && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

func matches(have map[string]string, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		if have[want[i]] != want[i+1] {
			return false
		}
	}
	return true
}

// Histogram is a histogram's cumulative buckets, summed over the series
// that match, with its sum and count.
type Histogram struct {
	Bounds []float64 // upper bounds, ascending, the last +Inf
	Counts []float64 // cumulative
	Sum    float64
	Count  float64
}

// Histogram reads the histogram of that base name (its _bucket, _sum and
// _count series) over the series whose labels match. A histogram that is
// absent has no buckets.
func (m Metrics) Histogram(name string, labels ...string) Histogram {
	byBound := map[float64]float64{}
	for _, s := range m.byName[name+"_bucket"] {
		if !matches(s.Labels, labels) {
			continue
		}
		b, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			continue
		}
		byBound[b] += s.Value
	}
	h := Histogram{Sum: m.Sum(name+"_sum", labels...), Count: m.Sum(name+"_count", labels...)}
	for b := range byBound {
		h.Bounds = append(h.Bounds, b)
	}
	slices.Sort(h.Bounds)
	for _, b := range h.Bounds {
		h.Counts = append(h.Counts, byBound[b])
	}
	return h
}

// Sub is what was observed since prev, an earlier reading of the same
// histogram. Against a reading of another process (a restart, or prev
// empty) it is h itself.
func (h Histogram) Sub(prev Histogram) Histogram {
	if prev.Count > h.Count || !slices.Equal(prev.Bounds, h.Bounds) {
		return h
	}
	d := Histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts)), Sum: h.Sum - prev.Sum, Count: h.Count - prev.Count}
	for i := range h.Counts {
		d.Counts[i] = h.Counts[i] - prev.Counts[i]
	}
	return d
}

// Add is h and o together: the same histogram over two spans.
func (h Histogram) Add(o Histogram) Histogram {
	switch {
	case len(o.Bounds) == 0:
		return h
	case len(h.Bounds) == 0:
		return o
	case !slices.Equal(h.Bounds, o.Bounds):
		return h
	}
	s := Histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts)), Sum: h.Sum + o.Sum, Count: h.Count + o.Count}
	for i := range h.Counts {
		s.Counts[i] = h.Counts[i] + o.Counts[i]
	}
	return s
}

// Mean is the mean observation, NaN with none.
func (h Histogram) Mean() float64 {
	if h.Count <= 0 {
		return math.NaN()
	}
	return h.Sum / h.Count
}

// Quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: linearly within the bucket it falls in, the lowest bucket from 0,
// and the upper bound of the last finite bucket for anything beyond it.
// NaN with no observations.
func (h Histogram) Quantile(q float64) float64 {
	if len(h.Counts) == 0 || h.Counts[len(h.Counts)-1] <= 0 {
		return math.NaN()
	}
	total := h.Counts[len(h.Counts)-1]
	rank := q * total
	i, _ := slices.BinarySearch(h.Counts, rank)
	for i < len(h.Counts) && h.Counts[i] < rank {
		i++
	}
	if i >= len(h.Counts) {
		i = len(h.Counts) - 1
	}
	if math.IsInf(h.Bounds[i], 1) {
		if i == 0 {
			return math.NaN()
		}
		return h.Bounds[i-1]
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = h.Bounds[i-1], h.Counts[i-1]
	}
	in := h.Counts[i] - below
	if in <= 0 {
		return h.Bounds[i]
	}
	return lo + (h.Bounds[i]-lo)*(rank-below)/in
}

// Scrape reads a metrics page at url with client.
func Scrape(ctx context.Context, client *http.Client, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Metrics{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Metrics{}, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Metrics{}, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	return ParseMetrics(io.LimitReader(resp.Body, 64<<20))
}

// Gather reads a registry of the caller's own process (an agent's) into
// Metrics, with histograms as their _bucket, _sum and _count series as a
// scrape would have them.
func Gather(g prometheus.Gatherer) (Metrics, error) {
	fams, err := g.Gather()
	m := Metrics{byName: map[string][]Sample{}}
	for _, f := range fams {
		name := f.GetName()
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch {
			case mt.Counter != nil:
				m.add(Sample{name, labels, mt.GetCounter().GetValue()})
			case mt.Gauge != nil:
				m.add(Sample{name, labels, mt.GetGauge().GetValue()})
			case mt.Untyped != nil:
				m.add(Sample{name, labels, mt.GetUntyped().GetValue()})
			case mt.Histogram != nil:
				hg := mt.GetHistogram()
				for _, b := range hg.GetBucket() {
					m.add(Sample{name + "_bucket", withLabel(labels, "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)), float64(b.GetCumulativeCount())})
				}
				m.add(Sample{name + "_bucket", withLabel(labels, "le", "+Inf"), float64(hg.GetSampleCount())})
				m.add(Sample{name + "_sum", labels, hg.GetSampleSum()})
				m.add(Sample{name + "_count", labels, float64(hg.GetSampleCount())})
			}
		}
	}
	if err != nil {
		return m, fmt.Errorf("gathering metrics: %w", err)
	}
	return m, nil
}

func withLabel(labels map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(labels)+1)
	for lk, lv := range labels {
		out[lk] = lv
	}
	out[k] = v
	return out
}
