package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/sidecar"
	"github.com/allot-io/allot/client/sidecarclient"
	"github.com/allot-io/allot/internal/auth"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// securedCoordinator is one `allot coordinator` process with security on:
// TLS from a throwaway CA, mutual TLS for Raft, and bearer tokens (an
// admin's, and agent tokens bound to gw-1 and to gw-2).
type securedCoordinator struct {
	grpc, http, ca string
	tokens         map[string]string // token files, by name
	proc           *process
}

func startSecuredCoordinator(t *testing.T, rulesYAML string) *securedCoordinator {
	t.Helper()
	dir := t.TempDir()
	ca, err := auth.NewCA(dir, "ca", "allot.test")
	if err != nil {
		t.Fatal(err)
	}
	member, err := ca.IssueMember("c1")
	if err != nil {
		t.Fatal(err)
	}
	tokensFile, tokens := cliTokens(t, "admin=admin", "gw-1=agent:gw-1", "gw-2=agent:gw-2")
	addrs := loopbackAddrs(t, 3)
	sc := &securedCoordinator{grpc: addrs[1], http: addrs[2], ca: ca.File, tokens: tokens}
	rulesFile := writeTemp(t, "cluster-rules.yaml", rulesYAML)
	sc.proc = startProcess(t, cliEnv(), "c1", "coordinator", "--node-id", "c1", "--data-dir", filepath.Join(dir, "data"), "--bootstrap",
		"--raft-addr", addrs[0], "--grpc-addr", sc.grpc, "--http-addr", sc.http, "--report-interval", "200ms", "--rules", rulesFile,
		"--cert", member.CertFile, "--key", member.KeyFile, "--ca", ca.File, "--auth-tokens", tokensFile)
	r, err := auth.NewReloader(auth.TLSFiles{CAFile: ca.File}, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: r.ClientConfig()}}
	eventually(t, "the coordinator's leader", []*process{sc.proc}, func() (bool, string) {
		resp, err := client.Get("https://" + sc.http + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return sc
}

// copyToken copies a token file to path, atomically: the sidecar re-reads
// its --token-file when it changes.
func copyToken(t *testing.T, from, path string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".new", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// sidecarAnswer is one answer of a sidecar's HTTP endpoint.
type sidecarAnswer struct {
	code   int
	header http.Header
	body   string
}

func sidecarDo(t *testing.T, method, url, body string) sidecarAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tenant", "acme")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return sidecarAnswer{resp.StatusCode, resp.Header, string(b)}
}

// sidecarStatus reads a sidecar's /v1/status.
func sidecarStatus(t *testing.T, addr string) agent.Status {
	t.Helper()
	var st agent.Status
	if err := json.Unmarshal([]byte(sidecarDo(t, http.MethodGet, "http://"+addr+"/v1/status", "").body), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// sidecarMetric reads one series' value from a sidecar's /metrics.
func sidecarMetric(t *testing.T, addr, series string) float64 {
	t.Helper()
	page := sidecarDo(t, http.MethodGet, "http://"+addr+"/metrics", "").body
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("/metrics has no %s", series)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestSidecarWithoutRules is the first day that went wrong: a sidecar
// whose token names another node, against a secured coordinator, gets no
// rules. It must never be silently unlimited: with the default policy
// every answer (HTTP, forward-auth, gRPC, Envoy's RLS and ext_authz)
// refuses, with Retry-After where the protocol has it, an
// ERROR names the cause and the fix, /v1/status and the metrics say so.
// With the token fixed, the same process gets the cluster's rules,
// enforces them and caches them; restarted while the cluster is down, it
// enforces the cached rules. The open and static policies answer as they
// say.
func TestSidecarWithoutRules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a coordinator and sidecars")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	sc := startSecuredCoordinator(t, "rules:\n  - {name: cluster-abuse, scope: tenant, algorithm: fixed_window, limit: 3, period: 1h, intent: abuse}\n")
	dir := t.TempDir()
	tokenFile, cache := filepath.Join(dir, "gw-1.token"), filepath.Join(dir, "rules-cache.json")
	copyToken(t, sc.tokens["gw-2"], tokenFile) // the mistake: a token for another node
	addrs := loopbackAddrs(t, 2)
	httpAddr := addrs[0]
	args := []string{"agent", "--coordinators", sc.grpc, "--node-id", "gw-1", "--ca", sc.ca, "--token-file", tokenFile,
		"--http-addr", httpAddr, "--grpc-addr", addrs[1], "--report-interval", "200ms", "--rules-cache", cache}
	side := startProcess(t, cliEnv(), "gw-1", args...)
	procs := []*process{sc.proc, side}
	eventually(t, "the sidecar", procs, func() (bool, string) { return httpOK("http://" + httpAddr + "/livez") })
	eventually(t, "the refusal in /v1/status", procs, func() (bool, string) {
		st := sidecarStatus(t, httpAddr)
		return st.ReportsRefused != nil, fmt.Sprintf("%+v", st)
	})
	eventually(t, "five refused reports", procs, func() (bool, string) {
		n := sidecarMetric(t, httpAddr, `allot_agent_reports_total{result="failed"}`)
		return n >= 5, fmt.Sprint(n)
	})

	check := sidecarDo(t, http.MethodPost, "http://"+httpAddr+"/v1/check", `{"tenant":"acme"}`)
	var d sidecar.CheckResponse
	if err := json.Unmarshal([]byte(check.body), &d); err != nil || check.code != http.StatusTooManyRequests || check.header.Get("Retry-After") != "1" ||
		d.Allowed || !d.NoRules || d.RetryAfterSeconds == nil || *d.RetryAfterSeconds != 1 {
		t.Errorf("POST /v1/check without rules: %d %v %s", check.code, check.header, check.body)
	}
	authz := sidecarDo(t, http.MethodGet, "http://"+httpAddr+"/v1/authz", "")
	if authz.code != http.StatusTooManyRequests || authz.header.Get("Retry-After") != "1" || !strings.Contains(authz.body, `"error":"no_rules"`) {
		t.Errorf("/v1/authz without rules: %d %v %s", authz.code, authz.header, authz.body)
	}
	grpcClient, err := sidecarclient.New(addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer grpcClient.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if gd, err := grpcClient.Check(ctx, agent.Request{Tenant: "acme"}); err != nil || gd.Allowed || !gd.NoRules || gd.RetryAfter <= 0 {
		t.Errorf("gRPC CheckStream without rules: %+v, %v", gd, err)
	}
	conn, err := grpc.NewClient(addrs[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}}}})
	if err != nil || rls.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("Envoy ShouldRateLimit without rules: %v, %v; want OVER_LIMIT", rls, err)
	}
	az, err := authv3.NewAuthorizationClient(conn).Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: "/", Headers: map[string]string{"x-tenant": "acme"}}}}})
	if err != nil || az.GetDeniedResponse().GetStatus().GetCode() != http.StatusTooManyRequests || !strings.Contains(az.GetDeniedResponse().GetBody(), `"error":"no_rules"`) {
		t.Errorf("Envoy ext_authz without rules: %v, %v; want denied 429, no_rules", az, err)
	}
	if ready := sidecarDo(t, http.MethodGet, "http://"+httpAddr+"/readyz", ""); ready.code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without rules: %d %s", ready.code, ready.body)
	}
	st := sidecarStatus(t, httpAddr)
	if st.RulesSource != "none" || st.RulesReady || st.UntilRules != "closed" || st.ReportsRefused.Cause != agent.RefusedWrongNode ||
		!strings.Contains(st.ReportsRefused.Fix, `--node-id (NodeID) "gw-1"`) {
		t.Errorf("/v1/status without rules: %+v, refused %+v", st, st.ReportsRefused)
	}
	if v := sidecarMetric(t, httpAddr, "allot_agent_rules_ready"); v != 0 {
		t.Errorf("allot_agent_rules_ready %v, want 0", v)
	}
	if v := sidecarMetric(t, httpAddr, `allot_agent_until_rules_decisions_total{policy="closed"}`); v != 5 {
		t.Errorf(`until_rules decisions{policy="closed"} %v, want 5 (check, authz, CheckStream, ShouldRateLimit, ext_authz)`, v)
	}
	const refused = `[ERROR] allot-agent.agent: the coordinators refuse this agent's reports: nothing it decides is billed: cause=wrong_node fix="the credential does not name this node: a token's nodes pattern must match --node-id (NodeID) \"gw-1\"`
	if n := strings.Count(side.out.String(), refused); n != 1 {
		t.Errorf("%d ERROR lines naming the cause and the fix for five refused reports, want 1:\n%s", n, side.out.String())
	}
	if _, err := os.Stat(cache); !os.IsNotExist(err) {
		t.Errorf("a rules cache without the cluster's rules: %v", err)
	}

	// The fix: the token for gw-1. The same process gets the rules.
	copyToken(t, sc.tokens["gw-1"], tokenFile)
	eventually(t, "the cluster's rules", procs, func() (bool, string) { return httpOK("http://" + httpAddr + "/readyz") })
	codes := map[int]int{}
	var last sidecar.CheckResponse
	for range 5 {
		a := sidecarDo(t, http.MethodPost, "http://"+httpAddr+"/v1/check", `{"tenant":"globex"}`)
		codes[a.code]++
		_ = json.Unmarshal([]byte(a.body), &last)
	}
	if codes[http.StatusOK] == 0 || codes[http.StatusOK] > 3 || last.Allowed || last.Rule != "cluster-abuse" || last.NoRules {
		t.Errorf("with the cluster's rules: answers %v, last %+v; want at most 3 admitted, then refused by cluster-abuse", codes, last)
	}
	if st := sidecarStatus(t, httpAddr); st.RulesSource != "cluster" || !st.RulesReady || st.ReportsRefused != nil {
		t.Errorf("/v1/status with the cluster's rules: %+v", st)
	}
	if v := sidecarMetric(t, httpAddr, "allot_agent_rules_ready"); v != 1 {
		t.Errorf("allot_agent_rules_ready %v, want 1", v)
	}
	if b, err := os.ReadFile(cache); err != nil || !strings.Contains(string(b), `"cluster-abuse"`) {
		t.Errorf("rules cache: %v\n%s", err, b)
	}
	side.stop(t)

	// Restarted while the cluster is down: the cached rules, at once.
	sc.proc.stop(t)
	again := startProcess(t, cliEnv(), "gw-1 again", args...)
	eventually(t, "the sidecar on its cache", []*process{again}, func() (bool, string) { return httpOK("http://" + httpAddr + "/readyz") })
	if st := sidecarStatus(t, httpAddr); st.RulesSource != "cache" || st.RulesReady || len(st.Rules) != 1 {
		t.Errorf("/v1/status on the cache: %+v", st)
	}
	var onCache sidecar.CheckResponse
	for range 4 {
		_ = json.Unmarshal([]byte(sidecarDo(t, http.MethodPost, "http://"+httpAddr+"/v1/check", `{"tenant":"initech"}`).body), &onCache)
	}
	if onCache.Allowed || onCache.Rule != "cluster-abuse" {
		t.Errorf("the fourth check on the cache: %+v; want refused by cluster-abuse", onCache)
	}
	// Its last report cannot reach the cluster: it would exit 1 after
	// --drain-timeout; nothing more to see.
	_ = again.cmd.Process.Kill()
	<-again.done

	t.Run("open", func(t *testing.T) {
		p, addr := startPolicySidecar(t, sc, "open")
		a := sidecarDo(t, http.MethodPost, "http://"+addr+"/v1/check", `{"tenant":"acme"}`)
		if a.code != http.StatusOK || !strings.Contains(a.body, `"no_rules":true`) {
			t.Errorf("open: %d %s", a.code, a.body)
		}
		waitOutput(t, p, "[ERROR] allot-agent.agent: no coordinator has answered, and this agent does not have the cluster's rules")
		if !strings.Contains(p.out.String(), `checks="every check admitted, nothing limited, abuse rules included (until_rules open)"`) {
			t.Errorf("the ERROR does not say what open does:\n%s", p.out.String())
		}
	})
	t.Run("static", func(t *testing.T) {
		startup := writeTemp(t, "startup.yaml", "rules:\n  - {name: startup-abuse, scope: tenant, algorithm: fixed_window, limit: 1, period: 1h, intent: abuse}\n")
		_, addr := startPolicySidecar(t, sc, "static:"+startup)
		eventually(t, "the start-up rules", nil, func() (bool, string) { return httpOK("http://" + addr + "/readyz") })
		first := sidecarDo(t, http.MethodPost, "http://"+addr+"/v1/check", `{"tenant":"acme"}`)
		second := sidecarDo(t, http.MethodPost, "http://"+addr+"/v1/check", `{"tenant":"acme"}`)
		if first.code != http.StatusOK || second.code != http.StatusTooManyRequests || !strings.Contains(second.body, `"rule":"startup-abuse"`) {
			t.Errorf("static: %d, then %d %s", first.code, second.code, second.body)
		}
		if st := sidecarStatus(t, addr); st.RulesSource != "until_rules" || st.RulesReady {
			t.Errorf("/v1/status on the start-up rules: %+v", st)
		}
	})
}

// startPolicySidecar starts a sidecar with --until-rules policy whose
// coordinators are out of reach.
func startPolicySidecar(t *testing.T, sc *securedCoordinator, policy string) (*process, string) {
	t.Helper()
	addr := loopbackAddrs(t, 1)[0]
	p := startProcess(t, cliEnv(), "gw-1 "+policy, "agent", "--coordinators", sc.grpc, "--node-id", "gw-1", "--ca", sc.ca,
		"--token-file", sc.tokens["gw-1"], "--http-addr", addr, "--report-interval", "200ms", "--until-rules", policy)
	eventually(t, "the sidecar", []*process{p}, func() (bool, string) { return httpOK("http://" + addr + "/livez") })
	return p, addr
}

// waitOutput waits until a process has written want.
func waitOutput(t *testing.T, p *process, want string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%q in %s's output", want, p.name), []*process{p}, func() (bool, string) {
		return strings.Contains(p.out.String(), want), p.out.String()
	})
}
