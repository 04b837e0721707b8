package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// opsRunbookOutputs are docs/operations.md's blocks from the runbooks of
// a sidecar without rules and of agents on fallback, which
// TestOperationsRunbookExamples checks.
var opsRunbookOutputs = []string{"reports-refused-log", "reports-refused-status", "reports-refused-check", "reports-accepted-log", "fallback-log"}

// TestOperationsRunbookExamples runs docs/operations.md's sidecar runbooks
// on loopback: a sidecar gw-17 given gw-18's token, refused, until it is
// given its own; then its coordinator SIGKILLed for longer than a lease
// period, and started again.
func TestOperationsRunbookExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a coordinator and a sidecar")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	const path = "../../docs/operations.md"
	doc := readDocOutputs(t, path)
	seen := map[string]bool{}
	work := t.TempDir()
	sh := docShell{t: t, dir: work}
	sh.exiting(exitOK)("allot token --name gw-18 --role agent --nodes gw-18 --append tokens.yaml --out gw-18.token")
	token := filepath.Join(t.TempDir(), "gw.token")
	copyFile(t, filepath.Join(work, "gw-18.token"), token)

	addrs := loopbackAddrs(t, 3)
	args := []string{"coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap", "--raft-addr", addrs[0], "--grpc-addr", addrs[1],
		"--http-addr", "", "--report-interval", "200ms", "--auth-tokens", filepath.Join(work, "tokens.yaml"),
		"--rules", writeTemp(t, "rules.yaml", "rules:\n  - {name: plan-quota, scope: tenant, algorithm: fixed_window, limit: 5, period: 1m, intent: quota}\n")}
	c1 := startProcess(t, cliEnv(), "c1", args...)
	// Leading before the sidecar starts: a report that fails for want of a
	// leader, between the refusal and the fix, would end the refusal
	// unlogged.
	eventually(t, "c1 leading", []*process{c1}, func() (bool, string) { return lineWith(c1.out.String(), "leading:") != "", c1.out.String() })
	gw := startProcess(t, cliEnv(), "gw-17", "agent", "--coordinators", addrs[1], "--node-id", "gw-17", "--token-file", token,
		"--http-addr", addrs[2], "--report-interval", "200ms")
	procs := []*process{c1, gw}
	logged := func(what string) func() (bool, string) {
		return func() (bool, string) { return lineWith(gw.out.String(), what) != "", gw.out.String() }
	}
	eventually(t, "gw-17 refused", procs, logged("the coordinators refuse this agent's reports"))
	checkDocOutput(t, doc, "reports-refused-log", lineWith(gw.out.String(), "the coordinators refuse this agent's reports"), seen)
	_, port, _ := net.SplitHostPort(addrs[2])
	sidecar := docShell{t: t, dir: work, subst: []string{"localhost:7600", "localhost:" + port}}
	checkDocTranscript(t, doc, "reports-refused-status", sidecar.exiting(exitOK), seen)
	checkDocTranscript(t, doc, "reports-refused-check", sidecar.exiting(exitOK), seen)

	// The runbook's fix: gw-17's own token, its entry in the tokens file.
	sh.exiting(exitOK)("allot token --name gw-17 --role agent --nodes gw-17 --append tokens.yaml --out gw-17.token")
	copyFile(t, filepath.Join(work, "gw-17.token"), token)
	eventually(t, "gw-17's rules", procs, logged("the cluster's rules arrived"))
	checkDocOutput(t, doc, "reports-accepted-log", lineWith(gw.out.String(), "the coordinators accept this agent's reports again")+"\n"+
		lineWith(gw.out.String(), "the cluster's rules arrived"), seen)

	// Its coordinator gone for longer than a lease period, and back.
	_ = c1.cmd.Process.Kill()
	<-c1.done
	procs = []*process{gw}
	eventually(t, "gw-17 on its fail mode", procs, logged("no coordinator answered for a lease period"))
	procs = append(procs, startProcess(t, cliEnv(), "c1", args...))
	eventually(t, "gw-17 back on leases", procs, logged("coordinator reachable again"))
	checkDocOutput(t, doc, "fallback-log", lineWith(gw.out.String(), "no coordinator answered for a lease period")+"\n"+
		lineWith(gw.out.String(), "coordinator reachable again"), seen)
	requireDocOutputsSeen(t, path, doc, seen)
}

// copyFile replaces to with a copy of from, atomically.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, to, data)
}
