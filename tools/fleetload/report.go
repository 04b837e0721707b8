package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/fleet"
	"google.golang.org/grpc/codes"
)

// num formats v with prec decimals, "-" for NaN or ±Inf.
func num(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

// div is a/b, NaN when b is not positive or a is NaN.
func div(a, b float64) float64 {
	if b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return nan
	}
	return a / b
}

const lineFormat = "%6s %-4s %-4s %7s %8s %5s %6s %6s %5s %5s %6s %6s %6s %7s %5s %6s %6s %5s %3s %8s %6s %-22s %6s %5s"

// header names a line's columns (docs/coordinator.md, "Measuring a
// fleet", says what each means).
func header() string {
	return fmt.Sprintf(lineFormat, "time", "load", "ldr", "reports", "in-time%", "fail", "p50ms", "p99ms", "shed", "cpu%", "µs/rep", "µs/key",
		"keys/r", "rss-MiB", "gor", "rnd99", "rndavg", "expir", "fb", "checks/s", "admit%", "refused/s:g/t/u/r/-", "unwarr", "h-cpu")
}

// format is the line as printed.
func (l *line) format() string {
	at := fmt.Sprintf("%.0fs", l.at.Seconds())
	if !l.measured {
		at = "w" + at // warm-up: left out of the summary
	}
	ldr := l.leader
	if l.changed {
		ldr += "*"
	}
	reports := l.reportsOK + l.reportsFailed
	secs := l.span.Seconds()
	cpuUS := l.cpu * 1e6
	refused := make([]string, len(l.counts.refused))
	for i, n := range l.counts.refused {
		refused[i] = fmt.Sprintf("%.0f", float64(n)/secs)
	}
	shed := l.shed
	unwarranted := int64(0)
	for r := range nRules {
		unwarranted += l.verdict.unwarranted[r]
	}
	phase := l.phase
	if phase == "" {
		phase = "×1"
	}
	return fmt.Sprintf(lineFormat, at, phase, ldr, num(reports, 0), num(100*div(l.reportsOK, reports), 3), num(l.reportsFailed, 0),
		num(1000*quantile(l.lat, 0.5), 1), num(1000*quantile(l.lat, 0.99), 1), num(shed, 0),
		num(100*div(l.cpu, l.cpuSpan), 0), num(div(cpuUS, l.leaderReports), 0), num(div(cpuUS, l.entries), 1),
		num(div(l.entries, l.entriesReports), 0), num(l.rss/(1<<20), 0), num(l.goroutines, 0),
		num(1000*l.round.Quantile(0.99), 1), num(1000*l.round.Mean(), 1), num(l.expiries, 0), num(l.fallbackAgents, 0),
		num(float64(l.counts.offered)/secs, 0), num(100*div(float64(l.counts.admitted), float64(l.counts.offered)), 1),
		strings.Join(refused, "/"), fmt.Sprint(unwarranted), num(100*l.harnessCPU/secs, 0))
}

// figures are a run's measured lines summed up.
type figures struct {
	lines                   int
	reportsOK, reportsFail  float64
	lat                     []float64
	byCode                  map[codes.Code]int64
	byResult                map[string]float64
	shed, leaderReports     float64
	cpu, cpuSpan            float64
	cpuForEntries, entries  float64 // over the lines with both
	entriesReports          float64
	rss, goroutines         []float64 // the last leader's, since it led
	lastLeader              string
	round                   fleet.Histogram
	expiries                float64
	fallbackMax             float64
	counts                  counts
	span                    float64
	verdict                 verdict
	harnessCPU              float64
	leaderChanges           int
	leaders                 []string
	targetChecks            float64 // checks/s the gateways were to offer
	inTimeOver, shedOver    float64 // during an overload
	reportsOver, rssMaxOver float64
	rssBefore               float64
}

// sum adds up the measured lines, and the windows judged at the end.
func (res *result) sum() figures {
	var f figures
	for i := range res.lines {
		l := &res.lines[i]
		if !l.measured {
			continue
		}
		f.lines++
		f.reportsOK += l.reportsOK
		f.reportsFail += l.reportsFailed
		f.lat = append(f.lat, l.lat...)
		for c, n := range l.byCode {
			if f.byCode == nil {
				f.byCode = map[codes.Code]int64{}
			}
			f.byCode[c] += n
		}
		if !math.IsNaN(l.shed) {
			f.shed += l.shed
		}
		for r, n := range l.byResult {
			if f.byResult == nil {
				f.byResult = map[string]float64{}
			}
			f.byResult[r] += n
		}
		if !math.IsNaN(l.leaderReports) {
			f.leaderReports += l.leaderReports
		}
		if !math.IsNaN(l.cpu) {
			f.cpu += l.cpu
			f.cpuSpan += l.cpuSpan
			if !math.IsNaN(l.entries) {
				f.cpuForEntries += l.cpu
				f.entries += l.entries
				f.entriesReports += l.entriesReports
			}
		}
		if ldr := strings.TrimSuffix(l.leader, "?"); ldr != "-" && ldr != f.lastLeader {
			// A new leader is another process: its memory and
			// goroutines are compared with its own.
			f.rss, f.goroutines, f.lastLeader = nil, nil, ldr
		}
		if !math.IsNaN(l.rss) {
			f.rss = append(f.rss, l.rss)
		}
		if !math.IsNaN(l.goroutines) {
			f.goroutines = append(f.goroutines, l.goroutines)
		}
		f.round = f.round.Add(l.round)
		f.expiries += l.expiries
		f.fallbackMax = math.Max(f.fallbackMax, l.fallbackAgents)
		f.counts = addCounts(f.counts, l.counts)
		f.span += l.span.Seconds()
		f.verdict.add(l.verdict)
		f.harnessCPU += l.harnessCPU
		if l.changed {
			f.leaderChanges++
		}
		if !slices.Contains(f.leaders, l.leader) {
			f.leaders = append(f.leaders, l.leader)
		}
		if l.phase != "" {
			f.inTimeOver += l.reportsOK
			f.reportsOver += l.reportsOK + l.reportsFailed
			if !math.IsNaN(l.shed) {
				f.shedOver += l.shed
			}
			if !math.IsNaN(l.rss) {
				f.rssMaxOver = math.Max(f.rssMaxOver, l.rss)
			}
		} else if res.overOn == 0 || l.at <= res.overOn {
			if !math.IsNaN(l.rss) {
				f.rssBefore = l.rss
			}
		}
	}
	f.verdict.add(res.final)
	slices.Sort(f.lat)
	f.targetChecks = float64(res.p.gateways) * res.p.rate
	return f
}

func addCounts(a, b counts) counts {
	a.offered += b.offered
	a.admitted += b.admitted
	a.dropped += b.dropped
	for i := range a.refused {
		a.refused[i] += b.refused[i]
	}
	return a
}

// quarters compares a series' median over its last quarter with its
// median over its second, as a ratio; ok is false with fewer than eight
// values, which cannot tell.
func quarters(v []float64) (second, last, ratio float64, ok bool) {
	if len(v) < 8 {
		return 0, 0, nan, false
	}
	q := len(v) / 4
	second, last = median(v[q:2*q]), median(v[len(v)-q:])
	return second, last, div(last, second), true
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// target is one row of the summary: what was measured against what the
// design asks, and whether it met it (pass nil: cannot tell).
type target struct {
	name, got, want string
	pass            *bool
}

func verdictOf(ok bool) *bool { return &ok }

func (t target) mark() string {
	switch {
	case t.pass == nil:
		return "n/a"
	case *t.pass:
		return "PASS"
	}
	return "MISS"
}

// targets are the run's rows against issue 41's targets.
func (res *result) targets(f figures) []target {
	var ts []target
	reports := f.reportsOK + f.reportsFail
	inTime := div(f.reportsOK, reports)
	ts = append(ts, target{"reports answered within the interval",
		fmt.Sprintf("%s%% (%.0f of %.0f; %.0f failed)", num(100*inTime, 3), f.reportsOK, reports, f.reportsFail), "≥ 99.9%",
		verdictOf(reports > 0 && inTime >= 0.999)})
	ts = append(ts, target{"lease expiries at agents", fmt.Sprintf("%.0f (agents on a fail mode at once, at most: %.0f)", f.expiries, f.fallbackMax), "0",
		verdictOf(f.expiries == 0)})
	var warr, unwarr []string
	var nUnwarr int64
	for r := range nRules {
		v := &f.verdict
		if v.warranted[r] > 0 {
			warr = append(warr, fmt.Sprintf("%s %d in %d key-spans", ruleNames[r], v.warranted[r], v.warrantedKeys[r]))
		}
		if v.unwarranted[r] > 0 {
			unwarr = append(unwarr, fmt.Sprintf("%s %d in %d key-spans", ruleNames[r], v.unwarranted[r], v.unwarrantedKeys[r]))
			nUnwarr += v.unwarranted[r]
		}
	}
	noRule := f.counts.refused[nRules]
	got := fmt.Sprintf("unwarranted %d", nUnwarr+noRule)
	if len(unwarr) > 0 {
		got += " (" + strings.Join(unwarr, ", ") + ")"
	}
	if noRule > 0 {
		got += fmt.Sprintf(", %d by no rule (no rules, or a fail mode)", noRule)
	}
	if len(warr) > 0 {
		got += "; where binding: " + strings.Join(warr, ", ")
	}
	ts = append(ts, target{"refusals only where a rule really binds", got,
		fmt.Sprintf("0 of keys under %.0f%% of their limit", 100*bindFraction), verdictOf(nUnwarr+noRule == 0)})
	for _, s := range []struct {
		name   string
		v      []float64
		format func(float64) string
	}{
		{"leader RSS, last quarter against the second", f.rss, func(v float64) string { return fmt.Sprintf("%.0f MiB", v/(1<<20)) }},
		{"leader goroutines, last quarter against the second", f.goroutines, func(v float64) string { return fmt.Sprintf("%.0f", v) }},
	} {
		second, last, ratio, ok := quarters(s.v)
		t := target{name: s.name, want: "≤ +10%", got: fmt.Sprintf("too few lines of the last leader (%d; 8 needed)", len(s.v))}
		if ok {
			t.got = fmt.Sprintf("%+.1f%% (medians %s → %s)", 100*(ratio-1), s.format(second), s.format(last))
			t.pass = verdictOf(ratio <= 1.10)
		}
		ts = append(ts, t)
	}
	if res.p.overload > 1 {
		ts = append(ts, res.overloadTarget(f))
	}
	return ts
}

// recoveryRun is how many seconds in a row must answer ≥ 99.9% of their
// report calls in time for the fleet to count as recovered.
const recoveryRun = 10

// overloadTarget is the overload's row: once the extra gateways are
// gone, how many report intervals until the report calls are answered in
// time again (≥ 99.9% in each second of recoveryRun in a row).
func (res *result) overloadTarget(f figures) target {
	t := target{name: fmt.Sprintf("recovery after ×%g for %v", res.p.overload, res.p.overloadFor), want: "≤ 3 intervals"}
	if res.overErr != nil || res.overOff == 0 {
		t.got = fmt.Sprintf("no overload: %v", res.overErr)
		return t
	}
	during := fmt.Sprintf("during it: %s%% in time, %.0f shed, leader RSS at most %.0f MiB (before: %.0f MiB)",
		num(100*div(f.inTimeOver, f.reportsOver), 2), f.shedOver, f.rssMaxOver/(1<<20), f.rssBefore/(1<<20))
	drop := int(res.overOff / time.Second)
	iv := res.p.reportInterval.Seconds()
	for s := drop; s+recoveryRun <= len(res.seconds); s++ {
		ok := true
		for _, sec := range res.seconds[s : s+recoveryRun] {
			if sec.calls == 0 || float64(sec.inTime) < 0.999*float64(sec.calls) {
				ok = false
				break
			}
		}
		if ok {
			n := float64(s-drop) / iv
			t.got = fmt.Sprintf("%.0f intervals; %s", n, during)
			t.pass = verdictOf(n <= 3)
			return t
		}
	}
	t.got = "not within the run; " + during
	t.pass = verdictOf(false)
	return t
}

// printSummary writes the run's summary: the targets, then the figures
// that explain them.
func (res *result) printSummary(w io.Writer) bool {
	f := res.sum()
	p := res.p
	fmt.Fprintf(w, "\nSUMMARY %d gateways × %d tenants × %d rules, %.0f checks/s per gateway, %v (%d lines of %v measured, after %v of warm-up)\n",
		p.gateways, p.tenants, nRules, p.rate, p.duration, f.lines, p.every, p.warmup)
	all := true
	for _, t := range res.targets(f) {
		fmt.Fprintf(w, "  %-52s %-4s  %s (target %s)\n", t.name, t.mark(), t.got, t.want)
		if t.pass != nil && !*t.pass {
			all = false
		}
	}
	var byCode []string
	for c, n := range f.byCode {
		byCode = append(byCode, fmt.Sprintf("%v %d", c, n))
	}
	slices.Sort(byCode)
	fmt.Fprintf(w, "  report calls: p50 %s ms, p99 %s ms, p99.9 %s ms, max %s ms; %d calls: %s\n",
		num(1000*quantile(f.lat, 0.5), 1), num(1000*quantile(f.lat, 0.99), 1), num(1000*quantile(f.lat, 0.999), 1), num(1000*quantile(f.lat, 1), 1),
		len(f.lat), strings.Join(byCode, ", "))
	var byResult []string
	for r, n := range f.byResult {
		if n > 0 {
			byResult = append(byResult, fmt.Sprintf("%s %.0f", r, n))
		}
	}
	slices.Sort(byResult)
	fmt.Fprintf(w, "  leader (%s, %d changes): CPU %s%% of a core, %s µs a report, %s µs a report entry, %s entries a report; reports %s; %.0f shed; round p99 %s ms, mean %s ms\n",
		strings.Join(f.leaders, ","), f.leaderChanges, num(100*div(f.cpu, f.cpuSpan), 0), num(div(1e6*f.cpu, f.leaderReports), 0),
		num(div(1e6*f.cpuForEntries, f.entries), 2), num(div(f.entries, f.entriesReports), 0), strings.Join(byResult, ", "), f.shed,
		num(1000*f.round.Quantile(0.99), 1), num(1000*f.round.Mean(), 1))
	c := f.counts
	var refused []string
	for r := range nRules {
		refused = append(refused, fmt.Sprintf("%s %.2f%%", ruleNames[r], 100*div(float64(c.refused[r]), float64(c.offered))))
	}
	refused = append(refused, fmt.Sprintf("no rule %.2f%%", 100*div(float64(c.refused[nRules]), float64(c.offered))))
	fmt.Fprintf(w, "  checks: offered %.0f/s (%.0f/s asked at the base load; %d dropped by the generator), admitted %.2f%%; refused by %s; the harness used %s%% of a core\n",
		div(float64(c.offered), f.span), f.targetChecks, c.dropped, 100*div(float64(c.admitted), float64(c.offered)), strings.Join(refused, ", "),
		num(100*div(f.harnessCPU, f.span), 0))
	if float64(c.dropped) > 0.01*float64(c.offered+c.dropped) {
		fmt.Fprintln(w, "  WARNING: the generator could not offer its load (more than 1% dropped): the machine is short of CPU, and the figures understate the fleet's load")
	}
	return all
}

// sweepHeader and row are the sweep's table: one line per (N, T).
func sweepHeader() string {
	return fmt.Sprintf("%5s %6s %9s %7s %7s %8s %7s %5s %8s %6s %6s %6s %7s %9s", "N", "T", "in-time%", "p50ms", "p99ms", "µs/entry", "keys/r",
		"cpu%", "rss-MiB", "shed", "rnd99", "expir", "unwarr", "checks/s")
}

func (res *result) sweepRow() string {
	f := res.sum()
	reports := f.reportsOK + f.reportsFail
	rss := nan
	if len(f.rss) > 0 {
		rss = slices.Max(f.rss) // the last leader's largest
	}
	var unwarr int64
	for r := range nRules {
		unwarr += f.verdict.unwarranted[r]
	}
	return fmt.Sprintf("%5d %6d %9s %7s %7s %8s %7s %5s %8s %6.0f %6s %6.0f %7d %9s", res.p.gateways, res.p.tenants,
		num(100*div(f.reportsOK, reports), 3), num(1000*quantile(f.lat, 0.5), 1), num(1000*quantile(f.lat, 0.99), 1),
		num(div(1e6*f.cpuForEntries, f.entries), 2), num(div(f.entries, f.entriesReports), 0), num(100*div(f.cpu, f.cpuSpan), 0),
		num(rss/(1<<20), 0), f.shed, num(1000*f.round.Quantile(0.99), 1), f.expiries, unwarr+f.counts.refused[nRules],
		num(div(float64(f.counts.offered), f.span), 0))
}
