package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestGrafanaDashboard runs every query of deploy/grafana/allot.json
// against a real Prometheus (Debian's, started on loopback) scraping a
// coordinator and a sidecar under traffic: each must return data.
func TestGrafanaDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Prometheus and allot processes")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("ALLOT_GATEWAY_TESTS") != "" {
			t.Fatal("prometheus is missing (make gateways-deps installs Debian's)")
		}
		t.Skip("prometheus is not installed")
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana", "allot.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil || len(dash.Panels) == 0 {
		t.Fatalf("the dashboard: %v", err)
	}

	addrs := loopbackAddrs(t, 5)
	env := cliEnv()
	rulesFile := writeTemp(t, "rules.yaml", "rules:\n  - {name: q, scope: tenant, algorithm: token_bucket, limit: 50, period: 1s, intent: quota}\n")
	coord := startProcess(t, env, "coordinator", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", addrs[2], "--rules", rulesFile, "--report-interval", "200ms")
	side := startProcess(t, env, "sidecar", "agent", "--coordinators", addrs[1], "--node-id", "gw-1", "--http-addr", addrs[3])
	procs := []*process{coord, side}
	eventually(t, "the sidecar ready", procs, func() (bool, string) { return httpOK("http://" + addrs[3] + "/readyz") })

	dir := t.TempDir()
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"+
		"  - {job_name: allot-coordinator, static_configs: [{targets: [%q]}]}\n  - {job_name: allot-agent, static_configs: [{targets: [%q]}]}\n", addrs[2], addrs[3])
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	pcmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addrs[4], "--log.level=warn")
	var plog syncBuffer
	pcmd.Stdout, pcmd.Stderr = &plog, &plog
	if err := pcmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pcmd.Process.Kill()
		_ = pcmd.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", plog.String())
		}
	})
	eventually(t, "prometheus ready", procs, func() (bool, string) { return httpOK("http://" + addrs[4] + "/-/ready") })

	// Traffic: over the quota, so that there are refusals too.
	stop := make(chan struct{})
	var sent atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if resp, err := httpClient.Post("http://"+addrs[3]+"/v1/check", "application/json", strings.NewReader(`{"tenant":"acme"}`)); err == nil {
				resp.Body.Close()
				sent.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer close(stop)

	query := func(expr string) (int, error) {
		resp, err := httpClient.Get("http://" + addrs[4] + "/api/v1/query?query=" + url.QueryEscape(strings.ReplaceAll(expr, "$__rate_interval", "15s")))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var r struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK || r.Status != "success" {
			return 0, fmt.Errorf("%s: %s", resp.Status, r.Error)
		}
		return len(r.Data.Result), nil
	}
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			eventually(t, fmt.Sprintf("data for panel %q (%s)", p.Title, target.Expr), procs, func() (bool, string) {
				n, err := query(target.Expr)
				if err != nil {
					t.Fatalf("panel %q: %s: %v", p.Title, target.Expr, err)
				}
				return n > 0, fmt.Sprintf("%d series after %d checks", n, sent.Load())
			})
		}
	}
}
