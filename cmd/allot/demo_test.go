package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/auth"
)

// useAllotBinary points the demo's coordinators at a built allot: this
// test binary has no `coordinator` subcommand. The binary is built
// without the race detector, so the coordinators run as shipped.
func useAllotBinary(t *testing.T) {
	t.Helper()
	bin := allotBinary(t)
	prev := demoExecutable
	demoExecutable = func() (string, error) { return bin, nil }
	t.Cleanup(func() { demoExecutable = prev })
}

// runDemoFor runs the demo in-process with args and returns its exit
// code, stdout and stderr.
func runDemoFor(t *testing.T, timeout time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errs bytes.Buffer
	code := run(ctx, &env{args: append([]string{"demo"}, args...), stdout: &out, stderr: &errs, getenv: func(string) string { return "" }})
	return code, out.String(), errs.String()
}

var (
	demoDirLine = regexp.MustCompile(`\(data and logs in (\S+)\)`)
	demoPID     = regexp.MustCompile(`\bpid (\d+)\b`)
)

// checkDemoCleanedUp fails t unless every coordinator process the demo's
// output names has exited and the demo's directory is gone.
func checkDemoCleanedUp(t *testing.T, out string) {
	t.Helper()
	m := demoDirLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output names no data directory:\n%s", out)
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the demo's directory %s is still there (%v)", m[1], err)
	}
	pids := demoPID.FindAllStringSubmatch(out, -1)
	if len(pids) < 3 {
		t.Fatalf("output names %d coordinator processes, want at least 3:\n%s", len(pids), out)
	}
	for _, p := range pids {
		pid, _ := strconv.Atoi(p[1])
		if processAlive(pid) {
			t.Errorf("coordinator process %d still runs after the demo returned", pid)
		}
	}
}

// processAlive reports whether a process with this ID exists. The demo
// waits for every child it kills, so none lingers as a zombie.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}

// TestDemo runs the main job as `make demo` does, shorter and with four
// gateways: three coordinator processes, the leader SIGKILLed halfway and
// restarted, and every check of the summary passing, the ledger matching
// the agents exactly. Under the race detector, which slows every check
// in the gateways tenfold, only the timing checks may fail.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo drives traffic for 16 s")
	}
	useAllotBinary(t)
	code, text, errs := runDemoFor(t, 3*time.Minute, "--duration", "16s", "--nodes", "4", "--no-tty")
	for _, want := range []string{"secured: mutual TLS between members", "SIGKILL to the Raft leader", "elected leader", "rejoined as a follower", "ledger acme/plan-quota"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// What must hold under the race detector too: the leader was replaced,
	// the killed member rejoined, and the ledger matches the agents'
	// counts exactly.
	var failed []string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "FAIL ") {
			continue
		}
		if !raceEnabled || strings.Contains(line, "ledger") || strings.Contains(line, "SIGKILL") {
			failed = append(failed, line)
		}
	}
	if len(failed) > 0 || (!raceEnabled && code != exitOK) || !strings.Contains(text, "── summary") {
		t.Fatalf("exit %d, failed: %q\nstdout:\n%s\nstderr:\n%s", code, failed, text, errs)
	}
	if raceEnabled && code != exitOK {
		t.Logf("under the race detector the demo's timing checks failed:\n%s", text)
	}
	checkDemoCleanedUp(t, text)
}

// TestDemoInterrupt stops the demo as Ctrl-C does, once traffic runs: it
// must return promptly, with no coordinator process left and its
// directory removed.
func TestDemoInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	useAllotBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errs := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, &env{args: []string{"demo", "--duration", "5m", "--nodes", "3", "--no-tty"}, stdout: out, stderr: errs, getenv: func(string) string { return "" }})
	}()
	deadline := time.NewTimer(cliDeadline)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(out.String(), "Driving traffic") {
		select {
		case code := <-done:
			t.Fatalf("the demo exited (%d) before driving traffic:\n%s\n%s", code, out.String(), errs.String())
		case <-deadline.C:
			cancel()
			<-done
			t.Fatalf("no traffic within %v:\n%s\n%s", cliDeadline, out.String(), errs.String())
		case <-tick.C:
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(cliDeadline):
		t.Fatalf("the demo did not return within %v of its interruption:\n%s", cliDeadline, out.String())
	}
	checkDemoCleanedUp(t, out.String())
}

func TestDemoFlags(t *testing.T) {
	for _, args := range [][]string{{"--duration", "2s"}, {"--nodes", "1"}, {"--nodes", "100"}, {"extra"}} {
		var out, errs bytes.Buffer
		code := run(context.Background(), &env{args: append([]string{"demo"}, args...), stdout: &out, stderr: &errs, getenv: func(string) string { return "" }})
		if code != exitUsage {
			t.Errorf("demo %v: exit %d, want %d (usage); stderr %s", args, code, exitUsage, errs.String())
		}
	}
}

// TestDemoSecurity checks the demo's cluster as laid out, without
// starting it: the credential files exist and secrets are private, the
// tokens file grants the admin token everything and the gateways' token
// their node IDs only, and each member runs this binary's `coordinator`
// in region demo with its own certificate and no rules file (the demo
// puts its rules through a follower).
func TestDemoSecurity(t *testing.T) {
	dir := t.TempDir()
	cl, err := newDemoCluster(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := cl.Creds
	if c == nil {
		t.Fatal("the demo's cluster is not secured")
	}
	agentToken := c.Agents[demoAgentToken]
	for _, f := range []string{c.CA, c.TokensFile, c.Admin, agentToken} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if f != c.CA && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	data, err := os.ReadFile(c.TokensFile)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.ParseTokens(c.TokensFile, data)
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if g, ok := tokens.Lookup(read(c.Admin)); !ok || g.Role != auth.Admin {
		t.Errorf("admin token: grant %+v, found %v; want the admin role", g, ok)
	}
	g, ok := tokens.Lookup(read(agentToken))
	if !ok || g.Role != auth.Agent || !g.MayReportAs(demoNodePrefix+"1", "demo") || g.MayReportAs("c1", "demo") {
		t.Errorf("agent token: grant %+v, found %v; want an agent for %s* only", g, ok, demoNodePrefix)
	}
	self, err := demoExecutable()
	if err != nil {
		t.Fatal(err)
	}
	for _, co := range cl.Coords {
		if co.Bin != self || co.Args[0] != "coordinator" {
			t.Errorf("%s runs %s %s, want %s coordinator", co.ID, co.Bin, co.Args[0], self)
		}
		args := strings.Join(co.Args, " ")
		for _, want := range []string{"--cert " + filepath.Join(c.Dir, co.ID+".pem"), "--ca " + c.CA, "--auth-tokens " + c.TokensFile,
			"--token-file " + c.Admin, "--region demo", "--data-dir " + dir} {
			if !strings.Contains(args, want) {
				t.Errorf("%s's flags %q lack %q", co.ID, args, want)
			}
		}
		if slices.Contains(co.Args, "--rules") {
			t.Errorf("%s's flags %q name a rules file", co.ID, args)
		}
	}
}
