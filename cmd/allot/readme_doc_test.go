package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadmeExamples runs the README's quick start as written, in bash,
// on free loopback ports instead of the defaults 7300, 7400, 7500 and
// 7600, and checks that the sixth check is the 429 the README shows.
func TestReadmeExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a coordinator and a sidecar")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	const path = "../../README.md"
	doc := readDocOutputs(t, path)
	seen := map[string]bool{}
	blocks, err := readDocBlocks(path)
	if err != nil {
		t.Fatal(err)
	}
	script, ok := blocks["quickstart.sh"]
	if !ok {
		t.Fatalf("%s: no block marked %squickstart.sh", path, docFileMarker)
	}
	// The quick start builds ./allot as allotBinary does; here ./allot
	// runs that build with the default addresses moved to free ports
	// (every flag can be set as ALLOT_<NAME>).
	const build = "go build -o allot ./cmd/allot\n"
	if !strings.HasPrefix(script.text, docFileMarker+"quickstart.sh\n"+build) {
		t.Fatalf("%s: the quick start no longer begins with %q, which this test replaces by the binary it built", script, build)
	}
	addrs := loopbackAddrs(t, 4)
	raft, grpc, http, sidecar := addrs[0], addrs[1], addrs[2], addrs[3]
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	text, err := script.withPorts(
		docPort{"7400", "the coordinator's gRPC", port(grpc)},
		docPort{"7500", "the coordinator's HTTP", port(http)},
		docPort{"7600", "the sidecar", port(sidecar)})
	if err != nil {
		t.Fatal(err)
	}
	text = strings.Replace(text, build, "", 1)
	// The next steps run in the same shell, with both still running, and
	// then the shell stops them as the README says.
	next, ok := blocks["quickstart-next.sh"]
	if !ok {
		t.Fatalf("%s: no block marked %squickstart-next.sh", path, docFileMarker)
	}
	text += strings.TrimPrefix(next.text, docFileMarker+"quickstart-next.sh\n") + "kill %1 %2\n"
	work := t.TempDir()
	wrapper := fmt.Sprintf(`#!/bin/sh
case "$1" in
coordinator) export ALLOT_RAFT_ADDR=%s ALLOT_GRPC_ADDR=%s ALLOT_HTTP_ADDR=%s ;;
agent) export ALLOT_HTTP_ADDR=%s ;;
*) export ALLOT_COORDINATOR=%s ;;
esac
exec %q "$@"
`, raft, grpc, http, sidecar, grpc, allotBinary(t))
	if err := os.WriteFile(filepath.Join(work, "allot"), []byte(wrapper), 0o700); err != nil {
		t.Fatal(err)
	}
	out := runScript(t, work, "set -e\n"+text) // a step that fails fails the test

	answers := strings.SplitAfter(out, "\n\n")
	var responses []string
	for _, a := range answers {
		if i := strings.Index(a, "HTTP/1.1 "); i >= 0 {
			responses = append(responses, a[i:])
		}
	}
	if len(responses) != 6 {
		t.Fatalf("the quick start printed %d HTTP answers, want 6:\n%s", len(responses), out)
	}
	for i, r := range responses[:5] {
		if !strings.HasPrefix(r, "HTTP/1.1 200 OK\r\n") {
			t.Errorf("answer %d is not 200 OK:\n%s", i+1, r)
		}
	}
	checkDocOutput(t, doc, "quickstart-429", strings.ReplaceAll(responses[5], "\r", ""), seen)
	requireDocOutputsSeen(t, path, doc, seen)
}

// runScript runs a shell script in dir and returns its stdout. It and
// whatever it started in the background run in a process group of their
// own, killed if the script runs out of time and waited for before the
// test's directories are removed.
func runScript(t *testing.T, dir, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*cliDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = dir, cliEnv("PATH="+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = cliDeadline // the background processes hold stdout until they exit
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroup(t, cmd.Process.Pid) })
	err := cmd.Wait()
	if err != nil {
		t.Fatalf("the script failed: %v\nstdout:\n%s\nstderr:\n%s%s", err, stdout.String(), stderr.String(), logsIn(dir))
	}
	return stdout.String()
}

// killGroup kills what is left of a process group and waits until none
// of it is left.
func killGroup(t *testing.T, pgid int) {
	t.Helper()
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	deadline := time.Now().Add(cliDeadline)
	for !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
		if time.Now().After(deadline) {
			t.Errorf("process group %d still running %v after SIGKILL", pgid, cliDeadline)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logsIn is the *.log files of dir, for a failure's message.
func logsIn(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "\n%s:\n%s", filepath.Base(f), data)
	}
	return b.String()
}
