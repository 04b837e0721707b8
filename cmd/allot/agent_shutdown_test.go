package main

import (
	"strings"
	"testing"
)

// TestAgentLogsItsShutdown: an agent sent SIGTERM says so, as it drains,
// and says when it has stopped; its operator otherwise reads nothing
// between "running" and the end of the log.
func TestAgentLogsItsShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an allot process")
	}
	rulesFile := writeTemp(t, "rules.yaml", "rules:\n"+ruleText("per-tenant"))
	addrs := loopbackAddrs(t, 1)
	p := startProcess(t, cliEnv(), "sidecar", "agent", "--rules", rulesFile, "--node-id", "gw-1", "--http-addr", addrs[0])
	eventually(t, "the sidecar ready", []*process{p}, func() (bool, string) { return httpOK("http://" + addrs[0] + "/readyz") })
	p.stop(t)
	out := p.out.String()
	for _, want := range []string{
		"[INFO]  allot-agent: shutting down: draining: drain_delay=0s drain_timeout=10s",
		"[INFO]  allot-agent: stopped: node=gw-1 mode=standalone",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	if i, j := strings.Index(out, "shutting down"), strings.Index(out, "stopped:"); i < 0 || j < i {
		t.Errorf("stopped is not logged after shutting down:\n%s", out)
	}
}
