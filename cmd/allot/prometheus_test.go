package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// promtool returns the path of Prometheus's promtool (make gateways-deps
// installs Debian's prometheus for it), skipping the test without it
// unless make test asked for every tool to be there.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("ALLOT_GATEWAY_TESTS") != "" {
			t.Fatal("promtool is missing (make gateways-deps installs Debian's prometheus)")
		}
		t.Skip("promtool is not installed")
	}
	return path
}

// TestPrometheusAlerts checks deploy/prometheus/alerts.yaml with promtool
// and runs its unit tests: for every alert, series that fire it and
// series that do not.
func TestPrometheusAlerts(t *testing.T) {
	t.Parallel() // its own processes, ports and directories: see TestMain
	bin := promtool(t)
	dir := filepath.Join("..", "..", "deploy", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestMetricsLint scrapes a real coordinator and a real sidecar that have
// served a check, and runs promtool check metrics on each page: clean,
// with the build's and the runtime's metrics on both.
func TestMetricsLint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts allot processes")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	bin := promtool(t)
	addrs := loopbackAddrs(t, 4)
	env := cliEnv()
	rulesFile := writeTemp(t, "rules.yaml", "rules:\n  - {name: q, scope: tenant, algorithm: token_bucket, limit: 10, period: 1s, intent: quota}\n")
	coord := startProcess(t, env, "coordinator", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", addrs[2], "--rules", rulesFile)
	side := startProcess(t, env, "sidecar", "agent", "--coordinators", addrs[1], "--node-id", "gw-1", "--http-addr", addrs[3])
	procs := []*process{coord, side}
	eventually(t, "the sidecar ready", procs, func() (bool, string) { return httpOK("http://" + addrs[3] + "/readyz") })
	resp, err := httpClient.Post("http://"+addrs[3]+"/v1/check", "application/json", strings.NewReader(`{"tenant":"acme"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wants := map[string][]string{
		// gRPC server metrics for every method, from the start.
		"coordinator": {`grpc_server_handled_total{grpc_code="OK",grpc_method="Report",grpc_service="allot.v1.AgentService",grpc_type="unary"}`,
			`allot_coordinator_reports_total{result="invalid"} 0`},
		// The check just served, counted and timed.
		"sidecar": {`allot_sidecar_http_requests_total{code="200",handler="check",method="post"} 1`,
			`allot_sidecar_http_request_duration_seconds_count{handler="check",method="post"} 1`, `allot_agent_reports_total{result="failed"} `},
	}
	for name, url := range map[string]string{"coordinator": "http://" + addrs[2] + "/metrics", "sidecar": "http://" + addrs[3] + "/metrics"} {
		resp, err := httpClient.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		page, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range append([]string{"allot_build_info{", "go_goroutines ", "process_cpu_seconds_total "}, wants[name]...) {
			if !bytes.Contains(page, []byte(want)) {
				t.Errorf("%s's /metrics has no %s", name, want)
			}
		}
		cmd := exec.Command(bin, "check", "metrics")
		cmd.Stdin = bytes.NewReader(page)
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics on the %s's page: %v\n%s", name, err, out)
		}
	}
}
