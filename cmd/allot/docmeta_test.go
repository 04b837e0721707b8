package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Every block of README.md and docs/*.md that shows what a command
// printed is a ```text block right after a marker: "<!-- output: NAME -->",
// which the doc's test compares with a run (docoutput_test.go), or
// "<!-- recorded: COMMAND, on DATE -->", the output of a run too long for
// go test and the command that repeats it. A ```console block is what the
// reader types, and nothing else.

// docOutputTest is a test that checks a doc's output blocks.
type docOutputTest struct {
	doc   string   // from the module root
	test  string   // the test function
	names []string // the blocks it checks; nil: those no other test of the doc names
}

// docOutputTests are the doc tests, by the doc each checks.
var docOutputTests = []docOutputTest{
	{doc: "README.md", test: "TestReadmeExamples"},
	{doc: "docs/agent.md", test: "TestAgentDocExamples"},
	{doc: "docs/api.md", test: "TestAPIDocExamples"},
	{doc: "docs/gateways.md", test: "TestGatewaysDocExamples"},
	{doc: "docs/operations.md", test: "TestOperationsDocExamples"},
	{doc: "docs/operations.md", test: "TestOperationsRunbookExamples", names: opsRunbookOutputs},
	{doc: "docs/regions.md", test: "TestRegionsDocExamples"},
	{doc: "docs/rules.md", test: "TestRulesDocExamples"},
	{doc: "docs/security.md", test: "TestSecurityDocExamples"},
}

// docsReadOtherwise are docs whose outputs a test finds in its own way,
// in ```console and ```json blocks, rather than by marker.
var docsReadOtherwise = map[string]string{
	"docs/billing.md": "TestBillingDocExamples", // by the "$ allot usage" lines, comparing the outputs' shape
}

var docRecordedMarker = regexp.MustCompile(`^\s*<!-- recorded: (.+), on (\d{4}-\d\d-\d\d) -->\s*$`)

// docOutputsOf is which of a doc's output blocks test checks, by tests.
func docOutputsOf(tests []docOutputTest, doc, test string, names []string) ([]string, error) {
	var mine []string
	others := map[string]bool{}
	found, rest := false, false
	for _, e := range tests {
		switch {
		case e.doc != doc:
		case e.test == test:
			found, rest = true, rest || e.names == nil
			mine = append(mine, e.names...)
		default:
			for _, n := range e.names {
				others[n] = true
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("%s is not a test of %s in docOutputTests", test, doc)
	}
	if !rest {
		return mine, nil
	}
	for _, n := range names {
		if !others[n] {
			mine = append(mine, n)
		}
	}
	return mine, nil
}

// docFence is one fenced block of a doc.
type docFence struct {
	line   int    // the opening fence's, from 1
	info   string // the opening fence's info string
	marker string // the line before it, if a marker, trimmed
	body   []string
}

// scanDocFences finds a doc's fenced blocks: a fence is a line of three or
// more backticks and an info string, closed by a line of as many.
func scanDocFences(text string) ([]docFence, error) {
	var fences []docFence
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimLeft(lines[i], " ")
		if !strings.HasPrefix(trimmed, "```") {
			continue
		}
		fence := trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`"))]
		indent := lines[i][:len(lines[i])-len(trimmed)]
		f := docFence{line: i + 1, info: strings.TrimSpace(trimmed[len(fence):])}
		if i > 0 && (docOutputMarker.MatchString(lines[i-1]) || docRecordedMarker.MatchString(lines[i-1])) {
			f.marker = strings.TrimSpace(lines[i-1])
		}
		j := i + 1
		for ; j < len(lines); j++ {
			if t := strings.TrimLeft(lines[j], " "); strings.HasPrefix(t, fence) && strings.Trim(t, "`") == "" {
				break
			}
			f.body = append(f.body, strings.TrimPrefix(lines[j], indent))
		}
		if j == len(lines) {
			return nil, fmt.Errorf("line %d: the block opened here is never closed", i+1)
		}
		fences = append(fences, f)
		i = j
	}
	return fences, nil
}

// docAccounting is what a doc's blocks are checked against.
type docAccounting struct {
	tests     []docOutputTest
	functions map[string]bool    // the package's test functions
	command   func(string) error // whether a recorded command exists here
}

// check returns each way the doc's outputs are not accounted for.
func (a docAccounting) check(doc, text string) []error {
	var errs []error
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", doc, line, fmt.Sprintf(format, args...)))
	}
	lines := strings.Split(text, "\n")
	var outputs []string
	for i, l := range lines {
		if !strings.Contains(l, "<!-- output:") && !strings.Contains(l, "<!-- recorded:") {
			continue
		}
		out, rec := docOutputMarker.FindStringSubmatch(l), docRecordedMarker.FindStringSubmatch(l)
		switch {
		case out == nil && rec == nil:
			fail(i+1, "%q is not <!-- output: NAME --> (a-z, 0-9, -) nor <!-- recorded: COMMAND, on YYYY-MM-DD -->", strings.TrimSpace(l))
			continue
		case i+1 == len(lines) || strings.TrimSpace(lines[i+1]) != "```text":
			fail(i+1, "a marker must be the line right before a ```text block")
		}
		if out != nil {
			outputs = append(outputs, out[1])
			continue
		}
		if _, err := time.Parse(time.DateOnly, rec[2]); err != nil {
			fail(i+1, "recorded on %q: %v", rec[2], err)
		}
		if err := a.command(rec[1]); err != nil {
			fail(i+1, "recorded with %q: %v", rec[1], err)
		}
	}
	fences, err := scanDocFences(text)
	if err != nil {
		return append(errs, fmt.Errorf("%s: %w", doc, err))
	}
	for _, f := range fences {
		switch f.info {
		case "text":
			if f.marker == "" {
				fail(f.line, "a ```text block is output: mark it <!-- output: NAME --> and compare it in the doc's test, or <!-- recorded: COMMAND, on DATE --> for a run too long for go test")
			}
		case "console":
			if _, ok := docsReadOtherwise[doc]; ok {
				continue
			}
			continued := false
			for k, l := range f.body {
				if !continued && strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "$ ") {
					fail(f.line+1+k, "a ```console block holds commands only; %q is output: make the block ```text, marked", l)
					break
				}
				continued = strings.HasSuffix(l, `\`)
			}
		}
	}
	if len(outputs) == 0 {
		return errs
	}
	var tests []string
	for _, e := range a.tests {
		if e.doc != doc {
			continue
		}
		tests = append(tests, e.test)
		if !a.functions[e.test] {
			fail(1, "its output blocks are checked by %s, which is not a test of this package", e.test)
		}
		for _, n := range e.names {
			if !slices.Contains(outputs, n) {
				fail(1, "%s checks output %q, which the doc does not have", e.test, n)
			}
		}
	}
	if tests == nil {
		fail(1, "it has output blocks (%s) but no test in docOutputTests compares them", strings.Join(outputs, ", "))
	}
	return errs
}

// recordedCommands is whether a recorded command names what exists under
// root: a target of its Makefile, or a package go run can run.
func recordedCommands(root string) func(string) error {
	return func(command string) error {
		f := strings.Fields(command)
		switch {
		case len(f) >= 2 && f[0] == "make":
			data, err := os.ReadFile(filepath.Join(root, "Makefile"))
			if err != nil {
				return err
			}
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(f[1]) + `:`).Match(data) {
				return fmt.Errorf("the Makefile has no target %s", f[1])
			}
			return nil
		case len(f) >= 3 && f[0] == "go" && f[1] == "run" && strings.HasPrefix(f[2], "./"):
			files, err := filepath.Glob(filepath.Join(root, f[2], "*.go"))
			if err != nil || len(files) == 0 {
				return fmt.Errorf("no Go package at %s", f[2])
			}
			return nil
		}
		return errors.New("want make TARGET or go run ./PACKAGE")
	}
}

var testFunc = regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)

// packageTests are the test functions of this package.
func packageTests(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(data), -1) {
			tests[m[1]] = true
		}
	}
	return tests
}

// TestDocOutputsAccountedFor checks README.md and docs/*.md: every
// ```text block is marked, every output marker is compared by a test, and
// every recorded output names a command that exists.
func TestDocOutputsAccountedFor(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{"../../README.md"}, docs...)
	a := docAccounting{tests: docOutputTests, functions: packageTests(t), command: recordedCommands("../..")}
	marked := map[string]bool{}
	for _, path := range docs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc := strings.TrimPrefix(path, "../../")
		for _, err := range a.check(doc, string(data)) {
			t.Error(err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			marked[doc] = marked[doc] || docOutputMarker.MatchString(l)
		}
	}
	for _, e := range docOutputTests {
		if !marked[e.doc] {
			t.Errorf("docOutputTests: %s checks %s, which has no output block", e.test, e.doc)
		}
	}
	for doc, test := range docsReadOtherwise {
		if !a.functions[test] {
			t.Errorf("docsReadOtherwise: %s is read by %s, which is not a test of this package", doc, test)
		}
	}
}

func TestDocAccountingRules(t *testing.T) {
	a := docAccounting{
		tests:     []docOutputTest{{doc: "a.md", test: "TestA"}, {doc: "b.md", test: "TestGone"}, {doc: "c.md", test: "TestA", names: []string{"x", "y"}}},
		functions: map[string]bool{"TestA": true},
		command:   recordedCommands("../.."),
	}
	tests := []struct {
		name, doc, text string
		want            []string // one substring per error, in order
	}{
		{"accounted for", "a.md", "<!-- output: out -->\n```text\nok\n```\n\n<!-- recorded: make chaos, on 2026-12-01 -->\n```text\nSUMMARY\n```\n\n" +
			"```console\n$ allot status \\\n    --coordinator 127.0.0.1:7400\n```\n\n```yaml\nrules: []\n```\n", nil},
		{"unmarked text", "a.md", "```text\nok\n```\n", []string{"a.md:1: a ```text block is output"}},
		{"marker before another block", "a.md", "<!-- output: out -->\n```json\n{}\n```\n", []string{"a.md:1: a marker must be the line right before a ```text block"}},
		{"marker before a blank line", "a.md", "<!-- output: out -->\n\n```text\nok\n```\n", []string{"a.md:1: a marker must be", "a.md:3: a ```text block is output"}},
		{"malformed marker", "a.md", "<!-- output: Out -->\n```text\nok\n```\n", []string{`a.md:1: "<!-- output: Out -->" is not`, "a.md:2: a ```text block"}},
		{"output in a console block", "a.md", "```console\n$ allot rules validate r.yaml\nok: 1 rule\n```\n", []string{`a.md:3: a ` + "```console" + ` block holds commands only; "ok: 1 rule" is output`}},
		{"no test for the doc", "d.md", "<!-- output: out -->\n```text\nok\n```\n", []string{"d.md:1: it has output blocks (out) but no test"}},
		{"a test that is gone", "b.md", "<!-- output: out -->\n```text\nok\n```\n", []string{"b.md:1: its output blocks are checked by TestGone, which is not a test"}},
		{"a name the doc lacks", "c.md", "<!-- output: x -->\n```text\nok\n```\n", []string{`c.md:1: TestA checks output "y", which the doc does not have`}},
		{"no such make target", "a.md", "<!-- recorded: make nope, on 2026-12-01 -->\n```text\nok\n```\n", []string{`recorded with "make nope": the Makefile has no target nope`}},
		{"no such package", "a.md", "<!-- recorded: go run ./cmd/nope, on 2026-12-01 -->\n```text\nok\n```\n", []string{`recorded with "go run ./cmd/nope": no Go package at ./cmd/nope`}},
		{"not a command it knows", "a.md", "<!-- recorded: ./run.sh, on 2026-12-01 -->\n```text\nok\n```\n", []string{"want make TARGET or go run ./PACKAGE"}},
		{"a bad date", "a.md", "<!-- recorded: make chaos, on 2026-13-01 -->\n```text\nok\n```\n", []string{`recorded on "2026-13-01"`}},
		{"never closed", "a.md", "```sh\nmake test\n", []string{"a.md: line 1: the block opened here is never closed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := a.check(tt.doc, tt.text)
			if len(errs) != len(tt.want) {
				t.Fatalf("errors %v, want %d: %q", errs, len(tt.want), tt.want)
			}
			for i, err := range errs {
				if !strings.Contains(err.Error(), tt.want[i]) {
					t.Errorf("error %d: %v, want %q", i, err, tt.want[i])
				}
			}
		})
	}

	for _, tt := range []struct {
		doc, test string
		want      []string
	}{
		{"c.md", "TestA", []string{"x", "y"}},
		{"a.md", "TestA", []string{"p", "q"}},
	} {
		got, err := docOutputsOf(append(a.tests, docOutputTest{doc: "a.md", test: "TestB", names: []string{"r"}}), tt.doc, tt.test, []string{"p", "q", "r"})
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("docOutputsOf(%s, %s) = %v, %v; want %v", tt.doc, tt.test, got, err, tt.want)
		}
	}
	if _, err := docOutputsOf(a.tests, "a.md", "TestC", nil); err == nil {
		t.Error("docOutputsOf a test not in the table: no error")
	}
}
