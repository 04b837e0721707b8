package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var demoAllPassed = regexp.MustCompile(`(?m)^all (\d+) checks passed$`)

// TestDemoChecks runs `allot demo` exactly as `make demo` does (30 s, 8
// gateways, the leader SIGKILLed halfway and restarted) and requires
// every one of its checks to pass, the timing ones included: CI's
// enforcement of what the demo promises. The race detector slows each
// check in the gateways tenfold, which the accuracy and latency checks
// feel, so it runs only without it:
//
//	go test -count=1 -run TestDemoChecks ./cmd/allot
func TestDemoChecks(t *testing.T) {
	if raceEnabled {
		t.Skip("the demo's timing checks need a binary without the race detector: go test -count=1 -run TestDemoChecks ./cmd/allot")
	}
	if testing.Short() {
		t.Skip("the demo drives traffic for 30 s")
	}
	useAllotBinary(t)
	code, text, errs := runDemoFor(t, 4*time.Minute, "--no-tty")
	var failed []string
	ok := 0
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "FAIL "):
			failed = append(failed, line)
		case strings.HasPrefix(line, "ok   "):
			ok++
		}
	}
	m := demoAllPassed.FindStringSubmatch(text)
	if code != exitOK || len(failed) > 0 || m == nil || m[1] != strconv.Itoa(ok) {
		t.Fatalf("exit %d, %d checks ok, failed: %q\nstdout:\n%s\nstderr:\n%s", code, ok, failed, text, errs)
	}
	// The summary lists every check: the figures, the failover and the
	// rejoin, the latency, and the ledger per tenant and rule.
	for _, want := range []string{"admitted", "wrongful quota denials", "SIGKILLed at half time", "restarted from its data directory",
		"requests never paused", "ledger acme/plan-quota", "ledger globex/per-user"} {
		if !strings.Contains(text, want) {
			t.Errorf("the summary lacks %q:\n%s", want, text)
		}
	}
	checkDemoCleanedUp(t, text)
	t.Logf("%d checks passed:\n%s", ok, text[strings.Index(text, "── summary"):])
}

// TestRegionsDemo runs `allot demo --regions 2` as a process: a parent
// and two regions' clusters, the tenant's traffic moving from one region
// to the other, and every check passing.
func TestRegionsDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the regions demo")
	}
	code, stdout, stderr := runAllot(t, cliEnv(), "demo", "--regions", "2", "--duration", "16s")
	if code != exitOK || !strings.Contains(stdout, "all 3 checks passed") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
}
