package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestReport feeds the events of a run with a passing, a failing and a
// hung test and checks what a person is shown: the failures' own lines
// and no passing test's, each package's result line, the table and the
// closing count.
func TestReport(t *testing.T) {
	const pkg = module + "cmd/x"
	events := []event{
		{Action: "start", Package: pkg},
		{Action: "run", Package: pkg, Test: "TestGood"},
		{Action: "output", Package: pkg, Test: "TestGood", Output: "    good_test.go:9: quiet\n"},
		{Action: "pass", Package: pkg, Test: "TestGood", Elapsed: 2},
		{Action: "run", Package: pkg, Test: "TestBad"},
		{Action: "output", Package: pkg, Test: "TestBad", Output: "    bad_test.go:7: seed 42: 645 admitted\n"},
		{Action: "output", Package: pkg, Test: "TestBad", Output: "--- FAIL: TestBad (3.00s)\n"},
		{Action: "fail", Package: pkg, Test: "TestBad", Elapsed: 3},
		{Action: "run", Package: pkg, Test: "TestHung"},
		{Action: "output", Package: pkg, Test: "TestHung", Output: "panic: test timed out\n"},
		{Action: "output", Package: pkg, Output: "FAIL\tgithub.com/allot-io/allot/cmd/x\t9.000s\n"},
		{Action: "fail", Package: pkg, Elapsed: 9},
		{Action: "output", Package: module + "algo", Output: "ok  \tgithub.com/allot-io/allot/algo\t1.000s\n"},
		{Action: "pass", Package: module + "algo", Elapsed: 1},
		{Action: "skip", Package: module + "docs"},
	}
	var out bytes.Buffer
	r := newReport(&out)
	for _, e := range events {
		// Through JSON, as the events come.
		b, _ := json.Marshal(e)
		var back event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		r.event(back)
	}
	r.summary([]step{{"install", 12}}, 5, true)
	got := out.String()
	for _, want := range []string{
		"seed 42: 645 admitted", "--- FAIL: TestBad", "panic: test timed out", "FAIL\tgithub.com/allot-io/allot/cmd/x",
		"      9.0s  FAIL  cmd/x\n", "      1.0s  ok    algo\n", "     12.0s  install\n",
		"   1 of    1 runs failed  cmd/x TestBad", "tests: 1 passed, 1 failed, 0 skipped\n",
		"ended (its last lines; the whole output is above) ──\ncmd/x TestBad\n    bad_test.go:7: seed 42: 645 admitted\ncmd/x TestHung\n    panic: test timed out\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"quiet", "docs"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("the report shows %q:\n%s", unwanted, got)
		}
	}
	if !r.failed() {
		t.Error("a run with a failed package is not failed")
	}
}
