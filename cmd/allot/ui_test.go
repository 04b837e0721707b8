package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium returns Debian's chromium (make gateways-deps installs it),
// skipping the test without it unless make test asked for every tool.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("ALLOT_GATEWAY_TESTS") != "" {
		t.Fatal("chromium is missing (make gateways-deps installs Debian's)")
	}
	t.Skip("chromium is not installed")
	return ""
}

// TestStatusPage loads a coordinator's /ui in headless Chromium while two
// sidecars serve traffic, and reads the rendered page: the leader, the
// rules, the gateways and their leases, and a chart with points. With
// ALLOT_UI_SCREENSHOT=FILE it saves a 1366×768 screenshot there (the one
// in docs/operations.md).
func TestStatusPage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts allot processes and a browser")
	}
	browser := chromium(t)
	addrs := loopbackAddrs(t, 5)
	env := cliEnv()
	rulesFile := writeTemp(t, "rules.yaml", `rules:
  - {name: plan-quota, scope: tenant, algorithm: token_bucket, limit: 40, period: 1s, intent: quota}
  - {name: api-capacity, scope: global, algorithm: token_bucket, limit: 5000, period: 1s, burst: 1000, intent: capacity}
`)
	coord := startProcess(t, env, "coordinator", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap", "--region", "eu-west",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", addrs[2], "--rules", rulesFile, "--report-interval", "200ms")
	procs := []*process{coord}
	for i, addr := range addrs[3:] {
		procs = append(procs, startProcess(t, env, fmt.Sprintf("sidecar-%d", i+1), "agent", "--coordinators", addrs[1],
			"--node-id", fmt.Sprintf("gw-%d", i+1), "--region", "eu-west", "--http-addr", addr))
	}
	for _, addr := range addrs[3:] {
		eventually(t, "the sidecars ready", procs, func() (bool, string) { return httpOK("http://" + addr + "/readyz") })
	}
	// acme over its quota on both gateways, globex under it on one.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i, tenant := range []string{"acme", "acme", "globex"} {
		wg.Go(func() {
			addr := addrs[3+i%2]
			for ctx.Err() == nil {
				if resp, err := httpClient.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(`{"tenant":"`+tenant+`"}`)); err == nil {
					resp.Body.Close()
				}
				if tenant == "globex" {
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}

	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1366, 768))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	bctx, tcancel := context.WithTimeout(bctx, 90*time.Second)
	defer tcancel()
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+addrs[2]+"/ui")); err != nil {
		t.Fatalf("loading /ui: %v", err)
	}
	// The chart draws rates over two seconds of counts, from the third
	// answer on.
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`Number(document.getElementById("chart").dataset.points) >= 2 && document.querySelectorAll("#pools tr td .bar").length > 0`,
		chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		t.Fatalf("waiting for the chart and the divisions: %v", err)
	}
	text := func(sel string) string {
		s, err := chromedp.Run(bctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return s
	}
	leader, rulesText, pools, agents := text("#leader"), text("#rules"), text("#pools"), text("#agents")
	points, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("chart").dataset.points`))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	for what, cond := range map[string]bool{
		"the leader is c1":                      leader == "c1",
		"the rules are listed":                  strings.Contains(rulesText, "plan-quota") && strings.Contains(rulesText, "api-capacity"),
		"acme's key is divided among gateways":  strings.Contains(pools, "plan-quota / acme") && strings.Contains(pools, "gw-1") && strings.Contains(pools, "gw-2"),
		"both gateways are listed as reporting": strings.Count(agents, "reporting") == 2,
		"the chart has points":                  points != "" && points != "0",
	} {
		if !cond {
			t.Errorf("%s: leader %q, rules %q, pools %q, gateways %q, chart points %q", what, leader, rulesText, pools, agents, points)
		}
	}
	if path := os.Getenv("ALLOT_UI_SCREENSHOT"); path != "" {
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
