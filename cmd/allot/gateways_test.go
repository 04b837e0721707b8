package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests in this file put real gateways, nginx and Caddy, in front of
// an allot sidecar through forward-auth (/v1/authz), with the files
// docs/gateways.md shows: every block marked "# file: NAME" there is read
// out of the doc and run as written, its ports 8000 (the gateway), 8080
// (the app) and 7600 (the sidecar) replaced with free ones. They skip
// when a gateway's binary is missing, unless ALLOT_GATEWAY_TESTS=1 (set
// by make test, whose gateways-deps target installs both), which makes a
// missing binary a failure.

// gatewayDoc is the page whose files the tests run.
const gatewayDoc = "../../docs/gateways.md"

// gatewayDocBlocks reads gatewayDoc's files.
func gatewayDocBlocks(t *testing.T) map[string]docBlock {
	t.Helper()
	blocks, err := readDocBlocks(gatewayDoc)
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

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
func startDaemon(t *testing.T, name string, environ []string, bin string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = environ
	return startDaemonCmd(t, name, cmd)
}

// startDaemonCmd starts cmd in its own process group. Cleanup stops it
// by its PID: SIGTERM, then, if it has not exited within 10 s, SIGKILL
// to its group (so no nginx worker outlives its master), and prints its
// output if the test failed.
func startDaemonCmd(t *testing.T, name string, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if p.cmd.SysProcAttr == nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	p.cmd.SysProcAttr.Setpgid = true
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
			t.Logf("output of %s (%s):\n%s", name, strings.Join(p.cmd.Args, " "), p.out.String())
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

// TestGatewayForwardAuth runs each gateway of docs/gateways.md with its
// sidecar and an app, from the doc's files: under the limit the client
// gets 200 and the app sees the request; past it the client gets 429
// with Retry-After and the RateLimit headers, and the app does not see
// it.
func TestGatewayForwardAuth(t *testing.T) {
	if testing.Short() && os.Getenv("ALLOT_GATEWAY_TESTS") != "1" {
		t.Skip("runs nginx, Caddy and sidecar processes")
	}
	blocks := gatewayDocBlocks(t)
	t.Run("nginx", func(t *testing.T) {
		g := startDocGateway(t, blocks, gatewayBinary(t, "nginx"), "sidecar-nginx.sh")
		// As root, nginx would fall back on Debian's /run and /var/lib/nginx
		// for whatever the file leaves out; as nobody it has the directory
		// only, as the doc says.
		g.unprivileged(t)
		g.writeFile(t, "nginx.conf", g.ports...)
		p := g.start(t, "nginx", "nginx.sh")
		g.run(t, p, func(t *testing.T, i int, resp *http.Response) {
			// nginx copies the sidecar's RateLimit headers onto the app's answer.
			if got, want := resp.Header.Get("RateLimit-Remaining"), strconv.Itoa(2-i); got != want {
				t.Errorf("admitted request %d: RateLimit-Remaining %q, want %q", i, got, want)
			}
		})
		// The pid file is where the doc says, the directory's, not Debian's.
		if pid, err := os.ReadFile(filepath.Join(g.dir, "nginx.pid")); err != nil || strings.TrimSpace(string(pid)) != strconv.Itoa(p.cmd.Process.Pid) {
			t.Errorf("nginx.pid in the directory: %q, %v; want nginx's PID %d", pid, err, p.cmd.Process.Pid)
		}
	})
	t.Run("caddy", func(t *testing.T) {
		g := startDocGateway(t, blocks, gatewayBinary(t, "caddy"), "sidecar-caddy.sh")
		g.writeFile(t, "Caddyfile", g.ports...)
		p := g.start(t, "caddy", "caddy.sh")
		g.run(t, p, func(t *testing.T, i int, _ *http.Response) {
			// Caddy's copy_headers hands the sidecar's headers to the app.
			if got, _ := g.app.last(); got != strconv.Itoa(2-i) {
				want := strconv.Itoa(2 - i)
				t.Errorf("admitted request %d: the app saw RateLimit-Remaining %q, want %q", i, got, want)
			}
		})
		if out := p.out.String(); !strings.Contains(out, `"admin endpoint disabled"`) {
			t.Errorf("Caddy opened its admin API; want the Caddyfile's admin off:\n%s", out)
		}
	})
}

// docGateway is one gateway's directory, holding the doc's files, with
// its sidecar and app running.
type docGateway struct {
	blocks  map[string]docBlock
	dir     string
	env     []string            // the doc's commands run with it, from dir
	cred    *syscall.Credential // and as this user, if set
	listen  string              // where the gateway serves
	ports   []docPort
	app     *upstreamApp
	sidecar *process
}

// startDocGateway makes the directory, picks the ports, starts an app
// and starts the sidecar with the doc's rules.yaml and its command from
// the doc's sidecar block. gateway is the gateway's binary, put on PATH.
func startDocGateway(t *testing.T, blocks map[string]docBlock, gateway, sidecar string) *docGateway {
	t.Helper()
	dir := t.TempDir()
	// nobody, whom a gateway may run as (unprivileged), or nginx's
	// workers under a root master, must be able to enter the directory.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	app := &upstreamApp{}
	srv := httptest.NewServer(app)
	t.Cleanup(srv.Close)
	addrs := loopbackAddrs(t, 2)
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	g := &docGateway{blocks: blocks, dir: dir, listen: addrs[1], app: app, ports: []docPort{
		{port: "8000", what: "the gateway", to: port(addrs[1])},
		{port: "8080", what: "the app", to: port(srv.Listener.Addr().String())},
		{port: "7600", what: "the sidecar", to: port(addrs[0])},
	}}
	path := filepath.Dir(allotBinary(t)) + string(os.PathListSeparator) + filepath.Dir(gateway) + string(os.PathListSeparator) + os.Getenv("PATH")
	for _, kv := range cliEnv() {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains([]string{"PATH", "PWD", "HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"}, name) {
			g.env = append(g.env, kv)
		}
	}
	g.env = append(g.env, "PATH="+path, "PWD="+dir, "HOME="+dir)
	g.writeFile(t, "rules.yaml")
	g.sidecar = g.start(t, "sidecar", sidecar, g.ports[2])
	eventually(t, "the sidecar", []*process{g.sidecar}, func() (bool, string) { return httpOK("http://" + addrs[0] + "/healthz") })
	return g
}

// writeFile writes the doc's file name into the directory with ports
// replaced (each must be in it), and returns what it wrote.
func (g *docGateway) writeFile(t *testing.T, name string, ports ...docPort) string {
	t.Helper()
	b, ok := g.blocks[name]
	if !ok {
		t.Fatalf("%s has no block whose first line is %q", gatewayDoc, docFileMarker+name)
	}
	text, err := b.withPorts(ports...)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(g.dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return text
}

// start writes the doc's script name and runs its one command from the
// directory as a shell would, exec'd so that the process the test stops
// by PID is the command itself.
func (g *docGateway) start(t *testing.T, proc, name string, ports ...docPort) *process {
	t.Helper()
	line, err := g.blocks[name].command(g.writeFile(t, name, ports...))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "exec "+line)
	cmd.Dir, cmd.Env = g.dir, g.env
	if g.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: g.cred}
	}
	return startDaemonCmd(t, proc, cmd)
}

// unprivileged makes the commands started from now on run as nobody, who
// owns the directory, when the test runs as root.
func (g *docGateway) unprivileged(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("looking up nobody to run the gateway as: %v", err)
	}
	uid, err := strconv.ParseUint(nobody.Uid, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	gid, err := strconv.ParseUint(nobody.Gid, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(g.dir, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	g.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// send sends one request through the gateway and reads the answer.
func (g *docGateway) send(t *testing.T, client *http.Client, method, path, tenant, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+g.listen+path, strings.NewReader(body))
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
func (g *docGateway) run(t *testing.T, p *process, admitted func(t *testing.T, i int, resp *http.Response)) {
	t.Helper()
	watch := []*process{p, g.sidecar}
	eventually(t, p.name+" to listen", watch, func() (bool, string) { return listening(g.listen) })
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
	rulesFile := writeTemp(t, "rules.yaml", gatewayDocBlocks(t)["rules.yaml"].text)
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
