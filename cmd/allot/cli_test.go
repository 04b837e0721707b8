package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allot-io/allot/agent/sidecar"
	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/fleet"
	"github.com/allot-io/allot/internal/loopback"
)

// The tests in this file run the allot binary as a user does. It is built
// once, on first use, into a directory TestMain removes (or make test
// builds it for every package: fleet.BuildAllot).
//
// The tests that start processes and judge only what they answer and
// print (the docs' examples, the CLI's verbs, the status page) call
// t.Parallel: each owns its ports (loopbackAddrs), directories
// (t.TempDir) and processes, and mostly waits on them, so go test runs
// them two at a time, after the others. Those that measure rates or
// times (TestRegionsProcess, TestShardsProcess, the demos) run alone.
var cliBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cliBuild.dir != "" {
		os.RemoveAll(cliBuild.dir)
	}
	os.Exit(code)
}

// cliDeadline bounds every wait in these tests: generous, for a loaded
// two-core machine under the race detector.
const cliDeadline = 60 * time.Second

// allotBinary builds ./cmd/allot from the module root, once, or takes the
// one make test built for every package ($ALLOT_BIN, fleet.BuildAllot).
func allotBinary(t *testing.T) string {
	t.Helper()
	cliBuild.once.Do(func() {
		if cliBuild.dir, cliBuild.err = os.MkdirTemp("", "allot-cli-test-"); cliBuild.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cliBuild.path, cliBuild.err = fleet.BuildAllot(ctx, cliBuild.dir)
	})
	if cliBuild.err != nil {
		t.Fatal(cliBuild.err)
	}
	return cliBuild.path
}

// cliEnv is this process's environment without ALLOT_ variables, which
// would change what the commands under test do, plus extra.
func cliEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ALLOT_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// runAllot runs one command to completion.
func runAllot(t *testing.T, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, allotBinary(t), args...)
	cmd.Env = environ
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("allot %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errOut.String()
}

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// process is a long-running allot command: a coordinator or an agent.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{} // closed once it has exited; err is then its status
	err  error
}

// startProcess starts a long-running command. Cleanup kills it if it is
// still running, and prints its output if the test failed.
func startProcess(t *testing.T, environ []string, name string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(allotBinary(t), args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = environ
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of %s (allot %s):\n%s", name, strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signalling %s: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(cliDeadline):
		t.Fatalf("%s did not exit within %v of SIGTERM", p.name, cliDeadline)
	}
	if p.err != nil {
		t.Fatalf("%s exited with %v", p.name, p.err)
	}
}

// loopbackAddrs picks n distinct free loopback addresses for the
// processes a test starts, below the kernel's ephemeral range: a port
// from that range can be taken by any test's outgoing connection between
// being picked here and the process binding it (TestAPIDocExamples' c2
// in CI).
func loopbackAddrs(t *testing.T, n int) []string {
	t.Helper()
	ports, err := loopback.Ports(n)
	if err != nil {
		t.Fatal(err)
	}
	addrs := make([]string, n)
	for i, p := range ports {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return addrs
}

// eventually polls cond until it holds, failing at the deadline with the
// last reason cond gave. A process in watch that exits fails the test at
// once: whatever it was waiting for will not come.
func eventually(t *testing.T, what string, watch []*process, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(cliDeadline)
	for {
		ok, why := cond()
		if ok {
			return
		}
		for _, p := range watch {
			if p.exited() {
				t.Fatalf("waiting for %s: %s exited: %v", what, p.name, p.err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", cliDeadline, what, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// httpOK reports whether GET url answers 200.
func httpOK(url string) (bool, string) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK, resp.Status
}

// TestCLIExitCodes checks what a user sees of the binary's exit codes.
func TestCLIExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bad := writeTemp(t, "bad.yaml", "rules:\n"+strings.Replace(ruleText("a"), "period: 1m", "period: -1s", 1))
	tests := []struct {
		args   []string
		code   int
		output string // in stdout or stderr
	}{
		{[]string{"--help"}, exitOK, "usage: allot <command>"},
		{[]string{"version"}, exitOK, "allot "},
		{[]string{"nope"}, exitUsage, `unknown command "nope"`},
		{[]string{"rules", "validate", "../../docs/examples/rules.yaml"}, exitOK, "ok: 5 rules"},
		{[]string{"rules", "validate", bad}, exitUsage, bad + ":6: rules[a].period: must be positive"},
		{[]string{"usage", "--help"}, exitOK, "usage: allot usage --coordinator"},
		{[]string{"status", "--coordinator", "127.0.0.1:1", "--timeout", "5s"}, exitFailure, "no coordinator answered"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runAllot(t, cliEnv(), tt.args...)
			if code != tt.code || !strings.Contains(stdout+stderr, tt.output) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d and %q", code, stdout, stderr, tt.code, tt.output)
			}
		})
	}
}

// member is one coordinator process and its addresses.
type member struct {
	id, raft, grpc, http string
	proc                 *process
}

// cliTokens makes tokens with `allot token`, for the roles given as
// name=role[:nodes], and returns the tokens file the coordinators take and
// each token's file.
func cliTokens(t *testing.T, specs ...string) (tokensFile string, files map[string]string) {
	t.Helper()
	dir := t.TempDir()
	files = map[string]string{}
	entries := "tokens:\n"
	for _, spec := range specs {
		name, role, _ := strings.Cut(spec, "=")
		role, nodes, _ := strings.Cut(role, ":")
		files[name] = filepath.Join(dir, name+".token")
		args := []string{"token", "--name", name, "--role", role, "--out", files[name]}
		if nodes != "" {
			args = append(args, "--nodes", nodes)
		}
		code, stdout, stderr := runAllot(t, cliEnv(), args...)
		_, entry, ok := strings.Cut(stdout, "tokens:\n")
		if code != exitOK || !ok {
			t.Fatalf("allot token: exit %d, %q, %q", code, stdout, stderr)
		}
		entries += entry
	}
	tokensFile = filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokensFile, []byte(entries), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokensFile, files
}

// TestCLICluster runs a three-member cluster and an agent sidecar as
// processes, secured with tokens made by `allot token`, and operates them
// with the CLI: status, rules, traffic until a 429, exact usage after the
// agent's last report, and a backup.
func TestCLICluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of processes")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	tokensFile, tokens := cliTokens(t, "admin=admin", "billing=reader", "gw-1=agent:gw-1")
	admin := cliEnv("ALLOT_TOKEN_FILE=" + tokens["admin"])
	reader := cliEnv("ALLOT_TOKEN_FILE=" + tokens["billing"])
	addrs := loopbackAddrs(t, 10)
	members := make([]*member, 3)
	var grpcAddrs []string
	var procs []*process
	for i := range members {
		m := &member{id: fmt.Sprintf("c%d", i+1), raft: addrs[3*i], grpc: addrs[3*i+1], http: addrs[3*i+2]}
		args := []string{"coordinator", "--node-id", m.id, "--data-dir", t.TempDir(),
			"--raft-addr", m.raft, "--grpc-addr", m.grpc, "--http-addr", m.http, "--report-interval", "200ms", "--auth-tokens", tokensFile}
		if i == 0 {
			args = append(args, "--bootstrap")
		} else {
			args = append(args, "--join", members[0].grpc)
		}
		m.proc = startProcess(t, admin, m.id, args...)
		members[i] = m
		grpcAddrs = append(grpcAddrs, m.grpc)
		procs = append(procs, m.proc)
	}
	all := strings.Join(grpcAddrs, ",")
	for _, m := range members {
		eventually(t, m.id+" /readyz", procs, func() (bool, string) { return httpOK("http://" + m.http + "/readyz") })
	}

	t.Run("status", func(t *testing.T) {
		eventually(t, "three voting members, each answering", procs, func() (bool, string) {
			code, stdout, stderr := runAllot(t, reader, "status", "--format", "json", "--coordinator", all)
			var cs clusterStatus
			if code != exitOK || json.Unmarshal([]byte(stdout), &cs) != nil {
				return false, fmt.Sprintf("exit %d: %s%s", code, stdout, stderr)
			}
			leaders := 0
			for _, m := range cs.Members {
				if !m.Voter || m.Error != "" || m.GRPCAddress == "" {
					return false, stdout
				}
				if m.Leader {
					leaders++
				}
			}
			return len(cs.Members) == 3 && leaders == 1 && cs.LeaderGRPCAddress != "", stdout
		})
		// A follower's view may lag the leader's by a heartbeat.
		eventually(t, "the status table on "+members[1].id, procs, func() (bool, string) {
			code, stdout, stderr := runAllot(t, reader, "status", "--coordinator", members[1].grpc)
			return code == exitOK && strings.Contains(stdout, "MEMBER  LEADER  VOTER  STATE") && strings.Contains(stdout, "(as c2 sees it)") &&
				len(leaderRow.FindAllString(stdout, -1)) == 1 && len(followerRow.FindAllString(stdout, -1)) == 2, stdout + stderr
		})
	})

	rulesFile := writeTemp(t, "rules.yaml", `rules:
  - name: tenant-quota
    description: five requests a minute per tenant
    scope: tenant
    algorithm: fixed_window
    limit: 5
    period: 1m
    intent: quota
`)
	t.Run("rules", func(t *testing.T) {
		code, _, stderr := runAllot(t, cliEnv(), "rules", "put", rulesFile, "--coordinator", all)
		if code != exitFailure || !strings.Contains(stderr, "not allowed") || !strings.Contains(stderr, "ALLOT_TOKEN_FILE") {
			t.Errorf("put without a token: exit %d, %q", code, stderr)
		}
		code, _, stderr = runAllot(t, reader, "rules", "put", rulesFile, "--coordinator", all)
		if code != exitFailure || !strings.Contains(stderr, "needs the admin role") {
			t.Errorf("put with a reader's token: exit %d, %q", code, stderr)
		}
		code, stdout, stderr := runAllot(t, admin, "rules", "put", rulesFile, "--coordinator", members[0].grpc)
		if code != exitOK || !strings.Contains(stdout, "created tenant-quota") {
			t.Fatalf("put: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		// Another member answers from its replica, once it has applied the put.
		eventually(t, "the rule on "+members[2].id, procs, func() (bool, string) {
			code, stdout, stderr := runAllot(t, reader, "rules", "get", "--coordinator", members[2].grpc)
			return code == exitOK && strings.Contains(stdout, "- name: tenant-quota\n") && strings.Contains(stdout, "limit: 5\n"), stdout + stderr
		})
	})

	agentAddr := addrs[9]
	gw := startProcess(t, cliEnv("ALLOT_TOKEN_FILE="+tokens["gw-1"]), "gw-1", "agent", "--coordinators", all, "--node-id", "gw-1", "--http-addr", agentAddr)
	procs = append(procs, gw)
	eventually(t, "the agent's rules", procs, func() (bool, string) { return httpOK("http://" + agentAddr + "/healthz") })

	var admitted, denied uint64
	t.Run("traffic", func(t *testing.T) {
		body := `{"tenant":"acme","user":"u1","route":"/search","ip":"203.0.113.7","priority":"interactive","cost":1}`
		for i := 0; i < 200 && denied < 3; i++ {
			resp, err := httpClient.Post("http://"+agentAddr+"/v1/check", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var d sidecar.CheckResponse
			err = json.NewDecoder(resp.Body).Decode(&d)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("check %d: %s: %v", i, resp.Status, err)
			}
			switch resp.StatusCode {
			case http.StatusOK:
				admitted++
			case http.StatusTooManyRequests:
				if denied == 0 {
					checkRefusal(t, resp.Header, d)
				}
				denied++
			default:
				t.Fatalf("check %d: %s", i, resp.Status)
			}
		}
		if denied == 0 || admitted == 0 {
			t.Fatalf("%d admitted and %d refused; want both", admitted, denied)
		}
		t.Logf("%d admitted, %d refused", admitted, denied)
	})

	// The agent's Close sends a last report: everything it decided is
	// then in the ledger.
	gw.stop(t)
	procs = procs[:len(procs)-1]

	t.Run("usage", func(t *testing.T) {
		// From two hours back: the billing window is an hour, and a run
		// that crosses the hour has usage in the window before.
		eventually(t, fmt.Sprintf("a ledger of exactly %d admitted and %d denied", admitted, denied), procs, func() (bool, string) {
			code, stdout, stderr := runAllot(t, reader, "usage", "--format", "csv", "--from", "2h", "--to", "now", "--coordinator", all)
			if code != exitOK {
				return false, stderr
			}
			a, d, err := ledgerTotals(stdout, "acme")
			if err != nil {
				t.Fatalf("%v\n%s", err, stdout)
			}
			if a > admitted || d > denied {
				t.Fatalf("the ledger holds more than the agent decided (%d admitted, %d denied):\n%s", admitted, denied, stdout)
			}
			return a == admitted && d == denied, stdout
		})
	})

	t.Run("backup", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "allot.snap")
		code, stdout, stderr := runAllot(t, admin, "cluster", "backup", path, "--coordinator", members[1].grpc)
		info, err := os.Stat(path)
		if code != exitOK || err != nil || info.Size() == 0 || !strings.Contains(stdout, "bytes to "+path) {
			t.Fatalf("backup: exit %d, stdout %q, stderr %q, %v", code, stdout, stderr, err)
		}
	})
}

// Rows of the status table: member, leader mark, voter, state, term,
// applied and commit indexes, then the addresses.
var (
	leaderRow   = regexp.MustCompile(`(?m)^c\d\s+\*\s+yes\s+leader\s+\d+\s+\d+\s+\d+\s+127\.0\.0\.1:`)
	followerRow = regexp.MustCompile(`(?m)^c\d\s+yes\s+follower\s+\d+\s+\d+\s+\d+\s+127\.0\.0\.1:`)
)

// checkRefusal checks a 429 carries what a client needs to back off.
func checkRefusal(t *testing.T, h http.Header, d sidecar.CheckResponse) {
	t.Helper()
	if s, err := strconv.Atoi(h.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After %q: want whole seconds, at least 1", h.Get("Retry-After"))
	}
	if got := h.Get("RateLimit-Policy"); got != `"tenant-quota";q=5;w=60` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got := h.Get("RateLimit"); !strings.HasPrefix(got, `"tenant-quota";r=0;t=`) {
		t.Errorf("RateLimit %q", got)
	}
	if d.Allowed || d.Rule != "tenant-quota" || d.Scope != "tenant" || d.Limit != 5 || d.PeriodSeconds != 60 || d.RetryAfterSeconds == nil || *d.RetryAfterSeconds < 1 {
		t.Errorf("decision %+v", d)
	}
}

// ledgerTotals sums a tenant's region lines in a usage CSV.
func ledgerTotals(text, tenant string) (admitted, denied uint64, err error) {
	rows, err := csv.NewReader(strings.NewReader(text)).ReadAll()
	if err != nil {
		return 0, 0, err
	}
	if len(rows) == 0 || strings.Join(rows[0], ",") != strings.Join(billCSVHeader, ",") {
		return 0, 0, fmt.Errorf("no CSV header")
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, r := range rows[1:] {
		if r[col["tenant"]] != tenant || r[col["region"]] == allRegions {
			continue
		}
		a, err1 := strconv.ParseUint(r[col["admitted"]], 10, 64)
		d, err2 := strconv.ParseUint(r[col["denied"]], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, err
		}
		admitted += a
		denied += d
	}
	return admitted, denied, nil
}

// TestSidecarTLS runs the sidecar process with --http-cert: it answers
// checks over HTTPS only, and serves a replaced certificate without a
// restart.
func TestSidecarTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a sidecar process")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	dir := t.TempDir()
	ca, err := auth.NewCA(dir, "ca", "allot.test")
	if err != nil {
		t.Fatal(err)
	}
	leaf := auth.Leaf{File: "sidecar", CommonName: "sidecar", IPs: []net.IP{net.ParseIP("127.0.0.1")}}
	cert, err := ca.Issue(leaf)
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := writeTemp(t, "rules.yaml", "rules:\n"+ruleText("quota"))
	addr := loopbackAddrs(t, 1)[0]
	p := startProcess(t, cliEnv(), "sidecar", "agent", "--rules", rulesFile, "--node-id", "gw-1", "--http-addr", addr,
		"--http-cert", cert.CertFile, "--http-key", cert.KeyFile)
	r, err := auth.NewReloader(auth.TLSFiles{CAFile: ca.File}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var serial string
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: r.ClientConfig(), DisableKeepAlives: true}}
	check := func() (bool, string) {
		resp, err := client.Post("https://"+addr+"/v1/check", "application/json", strings.NewReader(`{"tenant":"acme"}`))
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		serial = resp.TLS.PeerCertificates[0].SerialNumber.String()
		return resp.StatusCode == http.StatusOK, resp.Status
	}
	eventually(t, "a check over HTTPS", []*process{p}, check)
	first := serial
	if ok, _ := httpOK("http://" + addr + "/healthz"); ok {
		t.Error("plain HTTP answered on the TLS listener")
	}
	if _, err := ca.Issue(leaf); err != nil { // over the same files
		t.Fatal(err)
	}
	eventually(t, "the replaced certificate to be served", []*process{p}, func() (bool, string) {
		ok, why := check()
		return ok && serial != first, why
	})
}
