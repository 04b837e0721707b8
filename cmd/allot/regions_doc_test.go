package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestRegionsDocExamples runs the allot status docs/regions.md shows on a
// region's cluster that leases from a parent, with a sidecar deciding
// checks for a few tenants.
func TestRegionsDocExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two clusters and a sidecar")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	const path = "../../docs/regions.md"
	doc := readDocOutputs(t, path)
	seen := map[string]bool{}
	rulesFile := writeTemp(t, "rules.yaml", `rules:
  - {name: plan-quota, scope: tenant, algorithm: token_bucket, limit: 300, period: 1s, burst: 300, intent: quota, regions: {eu-west: 0.5, us-east: 0.5}}
`)
	addrs := loopbackAddrs(t, 5)
	parent := startProcess(t, cliEnv(), "parent-1", "coordinator", "--node-id", "parent-1", "--global", "--region", "global", "--data-dir", t.TempDir(),
		"--bootstrap", "--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", "", "--report-interval", "200ms", "--rules", rulesFile)
	region := startProcess(t, cliEnv(), "euw-1", "coordinator", "--node-id", "euw-1", "--region", "eu-west", "--data-dir", t.TempDir(),
		"--bootstrap", "--parent", addrs[1], "--parent-interval", "200ms", "--raft-addr", addrs[2], "--grpc-addr", addrs[3], "--http-addr", "",
		"--report-interval", "200ms", "--rules", rulesFile)
	sidecar := startProcess(t, cliEnv(), "gw-1", "agent", "--coordinators", addrs[3], "--node-id", "gw-1", "--region", "eu-west",
		"--http-addr", addrs[4], "--report-interval", "200ms")
	procs := []*process{parent, region, sidecar}
	eventually(t, "the sidecar ready", procs, func() (bool, string) { return httpOK("http://" + addrs[4] + "/readyz") })
	leased := regexp.MustCompile(`keys leased: [1-9]`)
	eventually(t, "the region's keys leased from the parent", procs, func() (bool, string) {
		for _, tenant := range []string{"acme", "globex", "initech"} {
			resp, err := httpClient.Post("http://"+addrs[4]+"/v1/check", "application/json", strings.NewReader(`{"tenant":"`+tenant+`"}`))
			if err == nil {
				resp.Body.Close()
			}
		}
		code, stdout, stderr := runAllot(t, cliEnv(), "status", "--coordinator", addrs[3])
		return code == exitOK && leased.MatchString(stdout) && strings.Contains(stdout, "agents: 1,"), stdout + stderr
	})
	sh := docShell{t: t, dir: t.TempDir(), subst: []string{"10.1.0.11:7400", addrs[3]}}
	checkDocTranscript(t, doc, "region-status", sh.exiting(exitOK), seen)
	requireDocOutputsSeen(t, path, doc, seen)
}
