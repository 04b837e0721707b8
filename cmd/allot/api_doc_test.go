package main

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/auth"
)

// grpcurlModule is the grpcurl docs/api.md's examples use, when none is
// in PATH: built through the module proxy, as the Makefile's staticcheck.
const grpcurlModule = "github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3"

// grpcurlDir is a directory holding grpcurl: the one in PATH, or else one
// go install builds.
func grpcurlDir(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("grpcurl"); err == nil {
		return filepath.Dir(p)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", grpcurlModule)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("grpcurl is not in PATH, and go install %s failed: %v\n%s", grpcurlModule, err, out)
	}
	return dir
}

// apiDocRules are the rules of the coordinator docs/api.md's examples
// ask: plan-quota, 5 a minute, and a rule this region has no share of.
const apiDocRules = `rules:
  - {name: plan-quota, scope: tenant, algorithm: fixed_window, limit: 5, period: 1m, intent: quota}
  - {name: us-only, scope: tenant, algorithm: fixed_window, limit: 10, period: 1m, intent: quota, regions: {us-east: 1}}
`

// TestAPIDocExamples runs docs/api.md's grpcurl and curl commands against
// a loopback coordinator in eu-west with a sidecar, and against a
// coordinator with TLS and tokens with a sidecar it refuses, and checks
// the middleware's 429.
func TestAPIDocExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("runs coordinators and sidecars")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	const path = "../../docs/api.md"
	doc := readDocOutputs(t, path)
	seen := map[string]bool{}
	grpcurl := grpcurlDir(t)
	work := t.TempDir()
	ca, err := auth.NewCA(work, "ca", "allot.example.com")
	if err != nil {
		t.Fatal(err)
	}
	member, err := ca.IssueMember("c2")
	if err != nil {
		t.Fatal(err)
	}
	setup := docShell{t: t, dir: work}
	for _, spec := range []string{"--name billing --role reader --out billing.token", "--name gw-eu --role agent --nodes 'gw-eu-*' --out gw-eu.token"} {
		setup.exiting(exitOK)("allot token --append tokens.yaml " + spec)
	}

	addrs := loopbackAddrs(t, 8)
	c1 := startProcess(t, cliEnv(), "c1", "coordinator", "--node-id", "c1", "--region", "eu-west", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", addrs[2], "--report-interval", "200ms",
		"--rules", writeTemp(t, "rules.yaml", apiDocRules))
	c2 := startProcess(t, cliEnv(), "c2", "coordinator", "--node-id", "c2", "--region", "eu-west", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", addrs[3], "--grpc-addr", addrs[4], "--http-addr", addrs[5], "--report-interval", "200ms",
		"--cert", member.CertFile, "--key", member.KeyFile, "--ca", ca.File, "--auth-tokens", filepath.Join(work, "tokens.yaml"))
	procs := []*process{c1, c2}
	eventually(t, "c1 ready", procs, func() (bool, string) { return httpOK("http://" + addrs[2] + "/readyz") })
	gw1 := startProcess(t, cliEnv(), "gw-1", "agent", "--coordinators", addrs[1], "--node-id", "gw-1", "--region", "eu-west",
		"--http-addr", addrs[6], "--report-interval", "200ms")
	// A sidecar without a token: c2 refuses its reports.
	gw2 := startProcess(t, cliEnv(), "gw-2", "agent", "--coordinators", addrs[4], "--node-id", "gw-2", "--region", "eu-west",
		"--ca", ca.File, "--http-addr", addrs[7], "--report-interval", "200ms")
	procs = append(procs, gw1, gw2)
	eventually(t, "gw-1 ready", procs, func() (bool, string) { return httpOK("http://" + addrs[6] + "/readyz") })
	eventually(t, "gw-2 refused", procs, func() (bool, string) {
		body := httpGet(t, "http://"+addrs[7]+"/v1/status")
		return strings.Contains(body, `"reports_refused"`), body
	})

	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	plain := docShell{t: t, dir: work, path: []string{grpcurl},
		subst: []string{"127.0.0.1:7400", addrs[1], "localhost:7500", "localhost:" + port(addrs[2]), "localhost:7600", "localhost:" + port(addrs[6])}}
	checkDocTranscript(t, doc, "put-rules-error", plain.exiting(64+3), seen) // grpcurl: 64 + InvalidArgument

	// The sixth check of a minute: five before it.
	if steps, err := transcriptSteps(doc["check-429"]); err == nil {
		for range 5 {
			plain.exiting(exitOK)(steps[0].cmd)
		}
	}
	checkDocTranscript(t, doc, "check-429", plain.exiting(exitOK), seen)
	eventually(t, "acme's usage in the ledger", procs, func() (bool, string) {
		body := httpGet(t, "http://"+addrs[2]+"/v1/usage?tenant=acme")
		return strings.Contains(body, `"admitted":"5","denied":"1"`), body
	})
	checkDocTranscript(t, doc, "http-endpoints", plain.exiting(exitOK), seen)
	checkDocTranscript(t, doc, "check-others", plain.exiting(exitOK), seen)
	checkDocTranscript(t, doc, "sidecar-status", plain.exiting(exitOK), seen)

	secure := docShell{t: t, dir: work, subst: []string{"10.0.0.1:7500", addrs[5], "localhost:7600", "localhost:" + port(addrs[7])}}
	checkDocTranscript(t, doc, "http-endpoints-tls", secure.exiting(exitOK), seen)
	checkDocTranscript(t, doc, "check-no-rules", secure.exiting(exitOK), seen)

	checkDocOutput(t, doc, "middleware-429", middlewareRefusal(t), seen)
	requireDocOutputsSeen(t, path, doc, seen)
}

// httpGet is the body GET url answers, whatever its status.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := httpClient.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	return resp.Status + " " + string(body)
}
