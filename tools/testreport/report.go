package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// module is cut from package paths in the tables.
const module = "github.com/allot-io/allot/"

// event is one line of go test -json (cmd/test2json).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build-output and build-fail
}

// testKey names one test of one package.
type testKey struct{ pkg, test string }

// outcome is what the runs of one test or package came to.
type outcome struct {
	runs, fails, skips int
	secs               float64 // all runs'
}

// report follows the events and prints what go test would, and the
// tables at the end.
type report struct {
	w      io.Writer
	output map[testKey][]string // a running test's lines, printed if it fails
	pkgs   map[string]*outcome
	tests  map[testKey]*outcome
	walls  []step // each command's wall time
	// why holds each failed test's last lines, repeated at the very end
	// of the report: a long failure's cause is often its last line, and
	// a log cut to its head and tail still shows it there.
	why []failure
}

// failure is a failed test and the lines it ended with.
type failure struct {
	key  testKey
	last []string
}

// lastLines is how many of a failed test's closing lines are repeated.
const lastLines = 4

func (r *report) failedWith(k testKey, lines []string) {
	var last []string
	for i := len(lines) - 1; i >= 0 && len(last) < lastLines; i-- {
		l := strings.TrimRight(lines[i], "\n")
		if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "--- FAIL") {
			continue
		}
		last = append(last, l)
	}
	slices.Reverse(last)
	r.why = append(r.why, failure{k, last})
}

func newReport(w io.Writer) *report {
	return &report{w: w, output: map[testKey][]string{}, pkgs: map[string]*outcome{}, tests: map[testKey]*outcome{}}
}

func (r *report) text(s string) { io.WriteString(r.w, s) }

func (r *report) event(e event) {
	switch e.Action {
	case "build-output":
		r.text(e.Output)
		return
	case "start", "pause", "cont", "bench", "build-fail":
		return
	}
	if e.Test == "" {
		r.packageEvent(e)
		return
	}
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "run":
		r.output[k] = r.output[k][:0]
	case "output":
		r.output[k] = append(r.output[k], e.Output)
	case "pass", "fail", "skip":
		o := r.tests[k]
		if o == nil {
			o = &outcome{}
			r.tests[k] = o
		}
		o.runs++
		o.secs += e.Elapsed
		switch e.Action {
		case "fail":
			o.fails++
			r.text(strings.Join(r.output[k], ""))
			r.failedWith(k, r.output[k])
		case "skip":
			o.skips++
		}
		delete(r.output, k)
	}
}

// packageEvent prints a package's own lines (ok, FAIL, a panic outside
// any test) as go test does without -v, and records its result.
func (r *report) packageEvent(e event) {
	switch e.Action {
	case "output":
		if e.Output != "PASS\n" {
			r.text(e.Output)
		}
	case "pass", "fail", "skip":
		o := r.pkgs[e.Package]
		if o == nil {
			o = &outcome{}
			r.pkgs[e.Package] = o
		}
		o.runs++
		o.secs += e.Elapsed
		switch e.Action {
		case "fail":
			o.fails++
			// A test that never ended (a panic, a timeout) left its lines
			// here: they say why the package failed.
			for k, lines := range r.output {
				if k.pkg == e.Package {
					r.text(strings.Join(lines, ""))
					r.failedWith(k, lines)
					delete(r.output, k)
				}
			}
		case "skip":
			o.skips++
		}
	}
}

// failed is true if any package or test failed.
func (r *report) failed() bool {
	for _, o := range r.pkgs {
		if o.fails > 0 {
			return true
		}
	}
	return false
}

// summary prints the tables: packages by time, the slowest tests, the
// steps, and the closing count; with repeat, every test that failed in
// any run with how many.
func (r *report) summary(steps []step, slowest int, repeat bool) {
	fmt.Fprintln(r.w)
	fmt.Fprintln(r.w, "── time per package (go test's own figure, each package's test binary; go test runs as many at once as there are cores) ──")
	pkgs := sortedBySecs(r.pkgs)
	for _, p := range pkgs {
		o := r.pkgs[p]
		if o.skips == o.runs && o.secs == 0 {
			continue // no test files
		}
		fmt.Fprintf(r.w, "%9.1fs  %-4s  %s\n", o.secs, result(o), strings.TrimPrefix(p, module))
	}
	var tests []testKey
	for k := range r.tests {
		if !strings.Contains(k.test, "/") {
			tests = append(tests, k)
		}
	}
	slices.SortFunc(tests, func(a, b testKey) int { return cmp.Compare(r.tests[b].secs, r.tests[a].secs) })
	if n := min(slowest, len(tests)); n > 0 {
		fmt.Fprintf(r.w, "── the %d slowest tests ──\n", n)
		for _, k := range tests[:n] {
			fmt.Fprintf(r.w, "%9.1fs  %-4s  %s %s\n", r.tests[k].secs, result(r.tests[k]), strings.TrimPrefix(k.pkg, module), k.test)
		}
	}
	if repeat {
		r.repeats()
	}
	all := append(slices.Clone(steps), r.walls...)
	if len(all) > 0 {
		fmt.Fprintln(r.w, "── steps (wall clock) ──")
		total := 0.0
		for _, s := range all {
			fmt.Fprintf(r.w, "%9.1fs  %s\n", s.secs, s.name)
			total += s.secs
		}
		fmt.Fprintf(r.w, "%9.1fs  in all\n", total)
	}
	var passed, failed, skipped int
	for _, o := range r.tests {
		passed += o.runs - o.fails - o.skips
		failed += o.fails
		skipped += o.skips
	}
	if len(r.why) > 0 {
		fmt.Fprintln(r.w, "── how each failed test ended (its last lines; the whole output is above) ──")
		for _, f := range r.why {
			fmt.Fprintf(r.w, "%s %s\n", strings.TrimPrefix(f.key.pkg, module), f.key.test)
			for _, l := range f.last {
				fmt.Fprintf(r.w, "    %s\n", clip(strings.TrimSpace(l), 400))
			}
		}
	}
	fmt.Fprintf(r.w, "tests: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
}

// clip shortens s to n bytes (at a rune boundary), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + " […]"
}

// repeats lists, for make test-repeat, every test and how many of its
// runs failed; the failures' output was printed as they happened.
func (r *report) repeats() {
	keys := make([]testKey, 0, len(r.tests))
	for k := range r.tests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b testKey) int {
		return cmp.Or(cmp.Compare(r.tests[b].fails, r.tests[a].fails), cmp.Compare(a.pkg, b.pkg), cmp.Compare(a.test, b.test))
	})
	fmt.Fprintln(r.w, "── runs per test ──")
	for _, k := range keys {
		o := r.tests[k]
		if strings.Contains(k.test, "/") && o.fails == 0 {
			continue
		}
		fmt.Fprintf(r.w, "%4d of %4d runs failed  %s %s (%.1fs a run)\n", o.fails, o.runs, strings.TrimPrefix(k.pkg, module), k.test, o.secs/float64(max(o.runs, 1)))
	}
}

func result(o *outcome) string {
	switch {
	case o.fails > 0:
		return "FAIL"
	case o.skips == o.runs:
		return "skip"
	}
	return "ok"
}

func sortedBySecs(m map[string]*outcome) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b].secs, m[a].secs), cmp.Compare(a, b)) })
	return keys
}
