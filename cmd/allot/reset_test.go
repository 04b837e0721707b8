package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/allot-io/allot/agent/sidecar"
)

// TestCLIReset: with real processes (a coordinator and a sidecar agent),
// a tenant refused for its spent quota is admitted again after `allot
// reset`; bad input is refused naming the field, and `allot reset list`
// shows the reset with who made it.
func TestCLIReset(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of processes")
	}
	tokensFile, tokens := cliTokens(t, "admin=admin", "billing=reader", "gw-1=agent:gw-1")
	admin := cliEnv("ALLOT_TOKEN_FILE=" + tokens["admin"])
	reader := cliEnv("ALLOT_TOKEN_FILE=" + tokens["billing"])
	addrs := loopbackAddrs(t, 4)
	coord := startProcess(t, admin, "c1", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", addrs[2], "--report-interval", "200ms", "--auth-tokens", tokensFile)
	procs := []*process{coord}
	eventually(t, "c1 /readyz", procs, func() (bool, string) { return httpOK("http://" + addrs[2] + "/readyz") })
	at := []string{"--coordinator", addrs[1]}
	rulesFile := writeTemp(t, "rules.yaml", `rules:
  - name: tenant-quota
    scope: tenant
    algorithm: fixed_window
    limit: 5
    period: 1h
    intent: quota
  - name: per-user
    scope: user
    algorithm: fixed_window
    limit: 1000
    period: 1h
    intent: quota
`)
	if code, stdout, stderr := runAllot(t, admin, append([]string{"rules", "put", rulesFile}, at...)...); code != exitOK {
		t.Fatalf("rules put: exit %d, %s%s", code, stdout, stderr)
	}
	gw := startProcess(t, cliEnv("ALLOT_TOKEN_FILE="+tokens["gw-1"]), "gw-1", "agent", "--coordinators", addrs[1], "--node-id", "gw-1", "--http-addr", addrs[3], "--report-interval", "200ms")
	procs = append(procs, gw)
	eventually(t, "the agent's rules", procs, func() (bool, string) { return httpOK("http://" + addrs[3] + "/healthz") })
	check := func(tenant string) bool {
		resp, err := http.Post("http://"+addrs[3]+"/v1/check", "application/json", strings.NewReader(fmt.Sprintf(`{"tenant":%q,"user":"u"}`, tenant)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d sidecar.CheckResponse
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	admitted := 0
	for range 20 {
		if check("acme") {
			admitted++
		}
	}
	if admitted != 5 || check("acme") {
		t.Fatalf("acme admitted %d of its quota of 5", admitted)
	}

	code, _, stderr := runAllot(t, reader, append([]string{"reset", "tenant-quota", "--tenant", "acme"}, at...)...)
	if code != exitFailure || !strings.Contains(stderr, "needs the admin role") {
		t.Errorf("reset with a reader's token: exit %d, %q", code, stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"reset", "nope", "--tenant", "acme"}, "rule: \"nope\" names no rule"},
		{[]string{"reset", "per-user", "--tenant", "acme"}, "user: is required"},
		{[]string{"reset", "tenant-quota", "--tenant", "acme", "--route", "/x"}, "route: is not part of the key"},
		{[]string{"reset", "tenant-quota", "--tenant", "ghost"}, "not found"},
	} {
		code, stdout, stderr := runAllot(t, admin, append(tc.args, at...)...)
		if code == exitOK || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %s%s; want a refusal naming %s", tc.args, code, stdout, stderr, tc.want)
		}
	}

	code, stdout, stderr := runAllot(t, admin, append([]string{"reset", "tenant-quota", "--tenant", "acme", "--reason", "case 42"}, at...)...)
	if code != exitOK || !strings.Contains(stdout, "reset 1: tenant-quota key tenant=acme") {
		t.Fatalf("reset: exit %d, %s%s", code, stdout, stderr)
	}
	eventually(t, "acme admitted again", procs, func() (bool, string) { return check("acme"), "" })
	admitted = 1
	for range 20 {
		if check("acme") {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("after the reset acme admitted %d of its quota of 5", admitted)
	}

	code, stdout, stderr = runAllot(t, reader, append([]string{"reset", "list"}, at...)...)
	if code != exitOK || !strings.Contains(stdout, "admin") || !strings.Contains(stdout, "case 42") || strings.Count(stdout, "\n") != 2 {
		t.Errorf("list: exit %d, %s%s", code, stdout, stderr)
	}
}
