package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium returns Debian's headless Chromium (make gateways-deps
// installs chromium-headless-shell, the browser without its windows: a
// third of the packages), or a full one, skipping the test without either
// unless make test asked for every tool.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("ALLOT_GATEWAY_TESTS") != "" {
		t.Fatal("chromium is missing (make gateways-deps installs Debian's chromium-headless-shell)")
	}
	t.Skip("chromium is not installed")
	return ""
}

// The test's rules and traffic: acme sends 200/s through two gateways
// against a 40/s quota, globex 20/s through one; both are under the 120/s
// they share. A chart must show each tenant's rate and its allowance on
// one readable scale: 40/s and 120/s on a common axis were what made the
// 40/s allowance a line on the floor.
const (
	uiRules = `rules:
  - {name: plan-quota, scope: tenant, algorithm: token_bucket, limit: 40, period: 1s, intent: quota}
  - {name: api-capacity, scope: global, algorithm: token_bucket, limit: 120, period: 1s, intent: capacity}
`
	uiQuota         = 40.0
	uiAllTenants    = "(all tenants)"
	uiAxisHeadroom  = 1.5 // an axis's top at most this many times the highest rate or allowance it shows
	uiMinPoints     = 3   // rates plotted per series before the page is read
	uiScreenshotPts = 15  // and before a screenshot: 30 s of lines across the chart
)

// pageState is what the status page shows, read from its DOM.
type pageState struct {
	Panels []struct {
		Rule       string  `json:"rule"`
		Top        float64 `json:"top"`       // the y axis's maximum, per second
		Allowance  float64 `json:"allowance"` // the highest allowance drawn
		Peak       float64 `json:"peak"`      // the highest rate plotted
		PlotTop    float64 `json:"plotTop"`   // the y of Top, in the SVG
		PlotBottom float64 `json:"plotBottom"`
		Series     []struct {
			Tenant string  `json:"tenant"`
			Points int     `json:"points"`
			Last   float64 `json:"last"`
			Coords string  `json:"coords"`
		} `json:"series"`
		Allowances []struct {
			Value float64 `json:"value"`
			Y     float64 `json:"y"`
		} `json:"allowances"`
	} `json:"panels"`
	Usage     [][]string `json:"usage"`   // the usage table's cells
	Clipped   []string   `json:"clipped"` // headers and cells whose text does not fit
	PageWidth int        `json:"pageWidth"`
	Viewport  int        `json:"viewport"`
}

// readPage is the JavaScript that reads a pageState.
const readPage = `JSON.stringify({
  panels: [...document.querySelectorAll("#charts .panel")].map(p => ({
    rule: p.dataset.rule, top: +p.dataset.top, allowance: +p.dataset.allowance, peak: +p.dataset.peak,
    plotTop: +p.dataset.plotTop, plotBottom: +p.dataset.plotBottom,
    series: [...p.querySelectorAll("polyline.series")].map(l => ({tenant: l.dataset.tenant, points: +l.dataset.points, last: +l.dataset.last, coords: l.getAttribute("points")})),
    allowances: [...p.querySelectorAll("line.allowance")].map(l => ({value: +l.dataset.value, y: +l.getAttribute("y1")})),
  })),
  usage: [...document.querySelectorAll("#usage tr")].map(r => [...r.cells].map(c => c.textContent)),
  clipped: [...document.querySelectorAll("header > *, h2, th, td, .ptitle, .legend span, .claim .who")].filter(e => {
    const r = e.getBoundingClientRect(), box = e.closest("section, header").getBoundingClientRect();
    return e.scrollWidth > e.clientWidth + 1 || r.right > box.right + 1 || r.right > innerWidth;
  }).map(e => e.tagName.toLowerCase() + " " + JSON.stringify(e.textContent.trim().slice(0, 60)) + " (" + e.scrollWidth + " px of text in " + e.clientWidth + ")"),
  pageWidth: document.documentElement.scrollWidth, viewport: innerWidth,
})`

// chartReady is true once each series of the test's traffic has n rates
// plotted and the leader shows the divisions.
func chartReady(n int) string {
	return fmt.Sprintf(`(() => {
  const points = (rule, tenant) => [...document.querySelectorAll("#charts .panel")].filter(p => p.dataset.rule === rule)
    .flatMap(p => [...p.querySelectorAll("polyline.series")]).filter(l => l.dataset.tenant === tenant).map(l => +l.dataset.points)[0] || 0;
  return Math.min(points("plan-quota", "acme"), points("plan-quota", "globex"), points("api-capacity", "acme"),
    points("api-capacity", "globex"), points("api-capacity", %q)) >= %d && document.querySelectorAll("#pools tr td .bar").length > 0;
})()`, uiAllTenants, n)
}

// TestStatusPage loads a coordinator's /ui in headless Chromium at
// 1366×768 while two sidecars serve traffic, and reads the rendered page
// as an operator would: the leader, the rules, the gateways and their
// leases; a chart per rule in which every tenant with traffic has a line
// of rates, on an axis that fits both the rates and the allowance; and no
// header or cell cut off. With ALLOT_UI_SCREENSHOT=FILE it waits for 30 s
// of lines and saves the whole page there (the one in docs/operations.md).
func TestStatusPage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts allot processes and a browser")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	browser := chromium(t)
	screenshot := os.Getenv("ALLOT_UI_SCREENSHOT")
	addrs := loopbackAddrs(t, 5)
	env := cliEnv()
	coord := startProcess(t, env, "coordinator", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap", "--region", "eu-west",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", addrs[2], "--rules", writeTemp(t, "rules.yaml", uiRules), "--report-interval", "200ms")
	procs := []*process{coord}
	for i, addr := range addrs[3:] {
		procs = append(procs, startProcess(t, env, fmt.Sprintf("sidecar-%d", i+1), "agent", "--coordinators", addrs[1],
			"--node-id", fmt.Sprintf("gw-%d", i+1), "--region", "eu-west", "--http-addr", addr))
	}
	for _, addr := range addrs[3:] {
		eventually(t, "the sidecars ready", procs, func() (bool, string) { return httpOK("http://" + addr + "/readyz") })
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, c := range []struct {
		tenant string
		addr   string
		every  time.Duration
	}{{"acme", addrs[3], 10 * time.Millisecond}, {"acme", addrs[4], 10 * time.Millisecond}, {"globex", addrs[3], 50 * time.Millisecond}} {
		wg.Go(func() { sendChecks(ctx, c.addr, c.tenant, c.every) })
	}

	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1366, 768))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	bctx, tcancel := context.WithTimeout(bctx, 150*time.Second)
	defer tcancel()
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+addrs[2]+"/ui")); err != nil {
		t.Fatalf("loading /ui: %v", err)
	}
	// A rate needs two seconds of counts; the page polls every two.
	want := uiMinPoints
	if screenshot != "" {
		want = uiScreenshotPts
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](chartReady(want), chromedp.WithPollingTimeout(100*time.Second))); err != nil {
		t.Errorf("waiting for %d rates in every series of the charts and for the divisions: %v", want, err)
	}
	text := func(sel string) string {
		s, err := chromedp.Run(bctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return s
	}
	leader, rulesText, pools, agents := text("#leader"), text("#rules"), text("#pools"), text("#agents")
	raw, err := chromedp.Run(bctx, chromedp.Evaluate[string](readPage))
	if err != nil {
		t.Fatalf("reading the page: %v", err)
	}
	var page pageState
	if err := json.Unmarshal([]byte(raw), &page); err != nil {
		t.Fatalf("reading the page: %v\n%s", err, raw)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	for what, cond := range map[string]bool{
		"the leader is c1":                      leader == "c1",
		"the rules are listed":                  strings.Contains(rulesText, "plan-quota") && strings.Contains(rulesText, "api-capacity"),
		"acme's key is divided among gateways":  strings.Contains(pools, "plan-quota / acme") && strings.Contains(pools, "gw-1") && strings.Contains(pools, "gw-2"),
		"the shared key's claims name tenants":  strings.Contains(pools, "gw-1 · globex") && strings.Contains(pools, "gw-2 · acme"),
		"both gateways are listed as reporting": strings.Count(agents, "reporting") == 2,
	} {
		if !cond {
			t.Errorf("%s: leader %q, rules %q, pools %q, gateways %q", what, leader, rulesText, pools, agents)
		}
	}
	checkCharts(t, &page)
	if len(page.Clipped) > 0 || page.PageWidth > page.Viewport {
		t.Errorf("at 1366×768 the page is %d px wide in a %d px window, and these do not fit:\n%s", page.PageWidth, page.Viewport, strings.Join(page.Clipped, "\n"))
	}
	if t.Failed() {
		t.Logf("the page as read: %s", raw)
		return
	}
	if screenshot != "" {
		// A relative path is the repository root's, where the doc's
		// command runs; the test runs in cmd/allot.
		if !filepath.IsAbs(screenshot) {
			screenshot = filepath.Join("..", "..", screenshot)
		}
		if err := os.WriteFile(screenshot, shot, 0o644); err != nil {
			t.Fatalf("saving the screenshot: %v", err)
		}
		t.Logf("saved the page in %s", screenshot)
	}
}

// checkCharts checks what an operator reads off the charts: a panel per
// rule; in it a line of rates, not only an allowance, for every tenant
// the usage table shows admitted; an axis whose top is within
// uiAxisHeadroom of the highest rate or allowance, so neither sits on the
// floor; and acme, sending five times its quota, plotted at its quota.
func checkCharts(t *testing.T, page *pageState) {
	t.Helper()
	points := map[[2]string]int{}
	last := map[[2]string]float64{}
	for _, p := range page.Panels {
		for _, s := range p.Series {
			points[[2]string{p.Rule, s.Tenant}] = s.Points
			last[[2]string{p.Rule, s.Tenant}] = s.Last
		}
		if len(p.Allowances) == 0 {
			t.Errorf("panel %s draws no allowance", p.Rule)
		}
		highest := max(p.Allowance, p.Peak)
		if highest <= 0 || p.Top < highest || p.Top > uiAxisHeadroom*highest {
			t.Errorf("panel %s: the axis runs to %.4g/s for rates up to %.4g/s and an allowance of %.4g/s; want it from the higher to %.1f× it",
				p.Rule, p.Top, p.Peak, p.Allowance, uiAxisHeadroom)
		}
		height := p.PlotBottom - p.PlotTop
		for _, a := range p.Allowances {
			if up := (p.PlotBottom - a.Y) / height; height <= 0 || up < 1/uiAxisHeadroom/2 || up > 1 {
				t.Errorf("panel %s: the %.4g/s allowance is drawn %.0f%% up the chart, want it between %.0f%% and the top", p.Rule, a.Value, 100*up, 100/uiAxisHeadroom/2)
			}
		}
	}
	want := [][2]string{{"plan-quota", "acme"}, {"plan-quota", "globex"}, {"api-capacity", "acme"}, {"api-capacity", "globex"}, {"api-capacity", uiAllTenants}}
	for _, row := range page.Usage {
		if len(row) < 4 {
			t.Errorf("usage row %q: want tenant, rule, region and admitted", row)
			continue
		}
		admitted, err := strconv.Atoi(strings.ReplaceAll(row[3], ",", ""))
		if err != nil {
			t.Errorf("usage row %q: admitted: %v", row, err)
			continue
		}
		if k := [2]string{row[1], row[0]}; admitted > 0 && k[1] != "(none)" && !slices.Contains(want, k) {
			want = append(want, k)
		}
	}
	for _, k := range want {
		if n := points[k]; n < uiMinPoints {
			t.Errorf("the %s chart has %d rates plotted for %s, want at least %d", k[0], n, k[1], uiMinPoints)
		}
	}
	if got := last[[2]string{"plan-quota", "acme"}]; got < uiQuota/2 || got > 2*uiQuota {
		t.Errorf("acme, sending 200/s against its %v/s quota, is plotted at %.4g/s", uiQuota, got)
	}
}

// sendChecks asks a sidecar for a tenant's check every interval until ctx
// ends.
func sendChecks(ctx context.Context, addr, tenant string, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/check", strings.NewReader(`{"tenant":"`+tenant+`"}`))
		if err != nil {
			return
		}
		if resp, err := httpClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}
