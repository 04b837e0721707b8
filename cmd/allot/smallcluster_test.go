package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/allot-io/allot/agent/sidecar"
)

// smallCluster is one real coordinator process with tokens (admin, the
// reader "billing", the agent "gw-1") and one sidecar agent process,
// with rules put: the CLI tests of the administrative commands run
// against it.
type smallCluster struct {
	admin, reader []string          // the environment with each token
	tokens        map[string]string // token files by name
	addrs         []string          // raft, gRPC, HTTP, the sidecar's HTTP
	procs         []*process
	at            []string // the CLI's --coordinator flag
}

func startSmallCluster(t *testing.T, rulesYAML string) *smallCluster {
	t.Helper()
	tokensFile, tokens := cliTokens(t, "admin=admin", "billing=reader", "gw-1=agent:gw-1")
	c := &smallCluster{admin: cliEnv("ALLOT_TOKEN_FILE=" + tokens["admin"]), reader: cliEnv("ALLOT_TOKEN_FILE=" + tokens["billing"]),
		tokens: tokens, addrs: loopbackAddrs(t, 4)}
	c.at = []string{"--coordinator", c.addrs[1]}
	c.procs = append(c.procs, startProcess(t, c.admin, "c1", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", c.addrs[0], "--grpc-addr", c.addrs[1], "--http-addr", c.addrs[2], "--report-interval", "200ms", "--auth-tokens", tokensFile))
	eventually(t, "c1 /readyz", c.procs, func() (bool, string) { return httpOK("http://" + c.addrs[2] + "/readyz") })
	rulesFile := writeTemp(t, "rules.yaml", rulesYAML)
	// Ready once it knows a leader, itself: it may take a moment more to
	// take writes.
	eventually(t, "the rules put", c.procs, func() (bool, string) {
		code, stdout, stderr := runAllot(t, c.admin, append([]string{"rules", "put", rulesFile}, c.at...)...)
		return code == exitOK, stdout + stderr
	})
	c.procs = append(c.procs, startProcess(t, cliEnv("ALLOT_TOKEN_FILE="+tokens["gw-1"]), "gw-1", "agent", "--coordinators", c.addrs[1],
		"--node-id", "gw-1", "--http-addr", c.addrs[3], "--report-interval", "200ms"))
	eventually(t, "the agent's rules", c.procs, func() (bool, string) { return httpOK("http://" + c.addrs[3] + "/healthz") })
	return c
}

// check asks the sidecar about tenant (and user u).
func (c *smallCluster) check(t *testing.T, tenant string) sidecar.CheckResponse {
	t.Helper()
	resp, err := http.Post("http://"+c.addrs[3]+"/v1/check", "application/json", strings.NewReader(fmt.Sprintf(`{"tenant":%q,"user":"u"}`, tenant)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d sidecar.CheckResponse
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}
