package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
)

// TestCleanShutdownFinalizesWindows: a sidecar stopped with SIGTERM sends
// its last batch, and the billing window it stopped in becomes final once
// it ends, with every check counted, not --agent-timeout (15 minutes)
// later. Before, the window waited for the timeout: an agent that stopped
// cleanly was waited for as one that crashed.
func TestCleanShutdownFinalizesWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a coordinator and a sidecar")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	addrs := loopbackAddrs(t, 4)
	coord := startProcess(t, cliEnv(), "c1", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", addrs[2],
		"--billing-window", "2s", "--report-interval", "200ms",
		"--rules", writeTemp(t, "rules.yaml", "rules:\n"+ruleText("plan-quota")))
	procs := []*process{coord}
	eventually(t, "c1 ready", procs, func() (bool, string) { return httpOK("http://" + addrs[2] + "/readyz") })
	gw := startProcess(t, cliEnv(), "gw-1", "agent", "--coordinators", addrs[1], "--node-id", "gw-1",
		"--http-addr", addrs[3], "--report-interval", "200ms")
	eventually(t, "gw-1 ready", append(procs, gw), func() (bool, string) { return httpOK("http://" + addrs[3] + "/readyz") })

	const checks = 20
	for range checks {
		resp, err := httpClient.Post("http://"+addrs[3]+"/v1/check", "application/json", strings.NewReader(`{"tenant":"acme","user":"u1"}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	gw.stop(t)

	eventually(t, "acme's windows final", procs, func() (bool, string) {
		body := httpGet(t, "http://"+addrs[2]+"/v1/usage?tenant=acme")
		js := body[max(strings.IndexByte(body, '{'), 0):] // after the status line
		var page struct {
			Records []struct {
				Admitted, Denied string
				Final            bool
			}
		}
		if err := json.Unmarshal([]byte(js), &page); err != nil || len(page.Records) == 0 {
			return false, body
		}
		total := 0
		for _, r := range page.Records {
			a, _ := strconv.Atoi(r.Admitted)
			d, _ := strconv.Atoi(r.Denied)
			total += a + d
			if !r.Final {
				return false, body
			}
		}
		return total == checks, fmt.Sprintf("%d of %d checks in final windows: %s", total, checks, body)
	})
}
