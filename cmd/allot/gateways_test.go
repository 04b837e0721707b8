package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"
)

// The tests in this file put real gateways, nginx and Caddy, in front of
// an allot sidecar through forward-auth (/v1/authz), with the configs of
// testdata/gateways/, which docs/gateways.md shows. They skip when a
// gateway's binary is missing, unless ALLOT_GATEWAY_TESTS=1 (set by
// make test, whose gateways-deps target installs both), which makes a
// missing binary a failure.

// gatewayRules is the sidecar's rule: 3 requests per tenant, refilling one
// every 20 minutes, so no window boundary can admit a fourth mid-test. It
// covers only the route /api/items, exactly: it applies only if the
// gateway passed the original path on and the sidecar dropped the query.
const gatewayRules = `rules:
  - name: gw-quota
    scope: tenant
    algorithm: token_bucket
    limit: 3
    period: 1h
    intent: quota
    match:
      routes: [/api/items]
`

// gatewayBinary finds a gateway's binary: on PATH, or in the sbin
// directories a user's PATH may leave out.
func gatewayBinary(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/bin", "/usr/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	if os.Getenv("ALLOT_GATEWAY_TESTS") == "1" {
		t.Fatalf("%s not found, and ALLOT_GATEWAY_TESTS=1 (make gateways-deps installs it)", name)
	}
	t.Skipf("%s not found (make gateways-deps installs it; ALLOT_GATEWAY_TESTS=1 makes this a failure)", name)
	return ""
}

// startDaemon starts a long-running process in its own process group.
// Cleanup stops it by its PID: SIGTERM, then, if it has not exited
// within 10 s, SIGKILL to its group (so no nginx worker outlives its
// master), and prints its output if the test failed.
func startDaemon(t *testing.T, name string, environ []string, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = environ
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Errorf("%s did not exit within 10 s of SIGTERM; killing it", name)
				_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("output of %s (%s %s):\n%s", name, bin, strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

// listening reports whether addr accepts TCP connections.
func listening(addr string) (bool, string) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false, err.Error()
	}
	c.Close()
	return true, ""
}

// gatewayConfig is what the templates in testdata/gateways/ are filled with.
type gatewayConfig struct {
	Dir      string // the gateway's own directory: logs, pid, temp files
	Listen   string // host:port the gateway serves
	Host     string // Listen's host
	Port     string // Listen's port
	Sidecar  string // host:port of the sidecar
	Upstream string // host:port of the app
	User     string // nginx's user directive, when run as root
}

func writeGatewayConfig(t *testing.T, tmpl, out string, cfg gatewayConfig) string {
	t.Helper()
	tp, err := template.ParseFiles(filepath.Join("testdata", "gateways", tmpl))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(cfg.Dir, out))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := tp.Execute(f, cfg); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// upstreamApp is the app behind the gateway: it counts what reaches it.
type upstreamApp struct {
	mu        sync.Mutex
	seen      int
	remaining []string // the RateLimit-Remaining header of each request
	bodies    []string
}

func (u *upstreamApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.seen++
	u.remaining = append(u.remaining, r.Header.Get("RateLimit-Remaining"))
	u.bodies = append(u.bodies, string(body))
	u.mu.Unlock()
	io.WriteString(w, "upstream ok\n")
}

func (u *upstreamApp) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen
}

// last is the RateLimit-Remaining header and the body of the last request.
func (u *upstreamApp) last() (remaining, body string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen == 0 {
		return "", ""
	}
	return u.remaining[u.seen-1], u.bodies[u.seen-1]
}

// TestGatewayForwardAuth runs each gateway against its own sidecar and
// app: under the limit the client gets 200 and the app sees the request;
// past it the client gets 429 with Retry-After and the RateLimit headers,
// and the app does not see it.
func TestGatewayForwardAuth(t *testing.T) {
	if testing.Short() && os.Getenv("ALLOT_GATEWAY_TESTS") != "1" {
		t.Skip("runs nginx, Caddy and sidecar processes")
	}
	t.Run("nginx", func(t *testing.T) {
		bin := gatewayBinary(t, "nginx")
		g := startGateway(t, "403")
		user := ""
		if os.Geteuid() == 0 { // else the workers would run as nobody, who cannot enter the test's directory
			user = "user root;"
		}
		g.cfg.User = user
		conf := writeGatewayConfig(t, "nginx.conf.tmpl", "nginx.conf", g.cfg)
		if out, err := exec.Command(bin, "-t", "-p", g.cfg.Dir, "-e", filepath.Join(g.cfg.Dir, "error.log"), "-c", conf).CombinedOutput(); err != nil {
			t.Fatalf("nginx -t: %v\n%s", err, out)
		}
		p := startDaemon(t, "nginx", os.Environ(), bin, "-p", g.cfg.Dir, "-e", filepath.Join(g.cfg.Dir, "error.log"), "-c", conf)
		g.run(t, p, func(t *testing.T, i int, resp *http.Response) {
			// nginx copies the sidecar's RateLimit headers onto the app's answer.
			if got, want := resp.Header.Get("RateLimit-Remaining"), strconv.Itoa(2-i); got != want {
				t.Errorf("admitted request %d: RateLimit-Remaining %q, want %q", i, got, want)
			}
		})
	})
	t.Run("caddy", func(t *testing.T) {
		bin := gatewayBinary(t, "caddy")
		g := startGateway(t, "")
		conf := writeGatewayConfig(t, "Caddyfile.tmpl", "Caddyfile", g.cfg)
		environ := append(cliEnv(), "HOME="+g.cfg.Dir, "XDG_DATA_HOME="+filepath.Join(g.cfg.Dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(g.cfg.Dir, "config"))
		p := startDaemon(t, "caddy", environ, bin, "run", "--config", conf, "--adapter", "caddyfile")
		g.run(t, p, func(t *testing.T, i int, _ *http.Response) {
			// Caddy's copy_headers hands the sidecar's headers to the app.
			if got, _ := g.app.last(); got != strconv.Itoa(2-i) {
				want := strconv.Itoa(2 - i)
				t.Errorf("admitted request %d: the app saw RateLimit-Remaining %q, want %q", i, got, want)
			}
		})
	})
}

// gatewayTest is one gateway's sidecar and app.
type gatewayTest struct {
	cfg     gatewayConfig
	app     *upstreamApp
	sidecar *process
}

// startGateway starts a sidecar (with --authz-deny-status deny, unless
// empty) and an app, and picks the gateway's address.
func startGateway(t *testing.T, deny string) *gatewayTest {
	t.Helper()
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(gatewayRules), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := loopbackAddrs(t, 2)
	args := []string{"agent", "--rules", rulesFile, "--node-id", "gw-1", "--http-addr", addrs[0]}
	if deny != "" {
		args = append(args, "--authz-deny-status", deny)
	}
	sidecar := startDaemon(t, "sidecar", cliEnv(), allotBinary(t), args...)
	app := &upstreamApp{}
	srv := httptest.NewServer(app)
	t.Cleanup(srv.Close)
	eventually(t, "the sidecar", []*process{sidecar}, func() (bool, string) { return httpOK("http://" + addrs[0] + "/healthz") })
	host, port, _ := net.SplitHostPort(addrs[1])
	return &gatewayTest{
		cfg: gatewayConfig{Dir: dir, Listen: addrs[1], Host: host, Port: port, Sidecar: addrs[0],
			Upstream: strings.TrimPrefix(srv.URL, "http://")},
		app: app, sidecar: sidecar,
	}
}

// send sends one request through the gateway and reads the answer.
func (g *gatewayTest) send(t *testing.T, client *http.Client, method, path, tenant, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+g.cfg.Listen+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tenant", tenant)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s through the gateway: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// run waits for the gateway p, then sends tenant acme's three admitted
// requests (admitted checks each answer further), the refused fourth, and
// two the rule does not cover: another tenant's, and one to another route.
func (g *gatewayTest) run(t *testing.T, p *process, admitted func(t *testing.T, i int, resp *http.Response)) {
	t.Helper()
	watch := []*process{p, g.sidecar}
	eventually(t, p.name+" to listen", watch, func() (bool, string) { return listening(g.cfg.Listen) })
	client := &http.Client{Timeout: 10 * time.Second}
	const path = "/api/items?page=2"
	for i, method := range []string{"GET", "POST", "DELETE"} {
		body := ""
		if method == "POST" {
			body = `{"item":"widget"}`
		}
		resp, got := g.send(t, client, method, path, "acme", body)
		if resp.StatusCode != http.StatusOK || got != "upstream ok\n" {
			t.Fatalf("admitted %s %d: %s %q", method, i, resp.Status, got)
		}
		if n := g.app.count(); n != i+1 {
			t.Fatalf("after admitted request %d the app saw %d requests, want %d", i, n, i+1)
		}
		if _, got := g.app.last(); got != body {
			t.Errorf("the app got body %q, want %q", got, body)
		}
		if resp.Header.Get("Retry-After") != "" {
			t.Errorf("admitted request %d has Retry-After %q", i, resp.Header.Get("Retry-After"))
		}
		admitted(t, i, resp)
	}

	resp, body := g.send(t, client, "GET", path, "acme", "")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fourth request: %s %q, want 429", resp.Status, body)
	}
	if n := g.app.count(); n != 3 {
		t.Errorf("the app saw the refused request: %d requests, want 3", n)
	}
	h := resp.Header
	if s, err := strconv.Atoi(h.Get("Retry-After")); err != nil || s < 1 || s > 3600 {
		t.Errorf("Retry-After %q, want seconds from 1 to 3600", h.Get("Retry-After"))
	}
	for k, want := range map[string]string{
		"RateLimit-Policy":    `"gw-quota";q=3;w=3600`,
		"RateLimit-Limit":     "3",
		"RateLimit-Remaining": "0",
		"Cache-Control":       "no-store",
		"Content-Type":        "application/json",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("429 %s: %q, want %q", k, got, want)
		}
	}
	if !strings.HasPrefix(h.Get("RateLimit"), `"gw-quota";r=0;t=`) {
		t.Errorf("429 RateLimit: %q", h.Get("RateLimit"))
	}
	if s, err := strconv.Atoi(h.Get("RateLimit-Reset")); err != nil || s < 1 || s > 3600 {
		t.Errorf("429 RateLimit-Reset: %q", h.Get("RateLimit-Reset"))
	}
	var refusal struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &refusal); err != nil || refusal.Error != "rate_limited" {
		t.Errorf("429 body %q: %v, want {\"error\":\"rate_limited\",…}", body, err)
	}

	for i, c := range []struct{ path, tenant string }{{path, "globex"}, {"/api/other", "acme"}} {
		if resp, got := g.send(t, client, "GET", c.path, c.tenant, ""); resp.StatusCode != http.StatusOK || got != "upstream ok\n" {
			t.Errorf("tenant %s on %s: %s %q, want 200", c.tenant, c.path, resp.Status, got)
		}
		if n := g.app.count(); n != 4+i {
			t.Errorf("the app saw %d requests, want %d", n, 4+i)
		}
	}
}

// TestGatewayAuthzFlags: the --authz-* flags are checked before the
// sidecar starts.
func TestGatewayAuthzFlags(t *testing.T) {
	rulesFile := writeTemp(t, "rules.yaml", gatewayRules)
	base := []string{"agent", "--rules", rulesFile, "--node-id", "gw-1", "--http-addr", "127.0.0.1:1"}
	for _, tt := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--authz-deny-status", "200"}, "--authz-deny-status 200: want a 4xx or 5xx status"},
		{[]string{"--authz-deny-status", "600"}, "--authz-deny-status 600: want a 4xx or 5xx status"},
		{[]string{"--authz-trusted-hops", "-1"}, "--authz-trusted-hops must not be negative"},
		{[]string{"--authz-tenant-header", "X Tenant"}, `--authz-tenant-header "X Tenant": not a header name`},
		{[]string{"--authz-api-key-header", "X-Key:"}, `--authz-api-key-header "X-Key:": not a header name`},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := runIn(t, nil, append(base, tt.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, exitUsage, tt.stderr)
			}
		})
	}
	cfg, err := (&authzFlags{tenant: "", apiKey: "X-Api-Key", user: "-", plan: "X-Plan", priority: "X-Priority", cost: "X-Cost", deny: 403}).config("agent")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TenantHeader != "-" || cfg.UserHeader != "-" || cfg.APIKeyHeader != "X-Api-Key" || cfg.DenyStatus != 403 {
		t.Errorf("config %+v", cfg)
	}
}
