package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// importBadFile is the file of docs/gateways.md's failed import, which the
// page names but does not show: a unit ratelimit does not have, and a
// misspelt field.
const importBadFile = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: fortnight, requests_per_unit: 1}
  - key: b
    ratelimit: {unit: second, requests_per_unit: 1}
`

// TestGatewaysDocExamples runs docs/gateways.md's allot rules import
// commands on envoyproxy/ratelimit files (the importer's test data stands
// for the page's /srv/runtime_data/current/ratelimit/config) and puts the
// result on a one-member cluster.
func TestGatewaysDocExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a coordinator")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	doc := readDocOutputs(t, gatewayDoc)
	seen := map[string]bool{}
	config, err := filepath.Abs(importTestdata)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	edge, err := os.ReadFile(filepath.Join(config, "edge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string][]byte{"edge.yaml": edge, "bad.yaml": []byte(importBadFile)} {
		if err := os.WriteFile(filepath.Join(work, name), text, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addrs := loopbackAddrs(t, 2)
	c1 := startProcess(t, cliEnv(), "c1", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", "")
	eventually(t, "c1 leading", []*process{c1}, func() (bool, string) {
		code, stdout, stderr := runAllot(t, cliEnv(), "status", "--format", "json", "--coordinator", addrs[1])
		var cs clusterStatus
		return code == exitOK && json.Unmarshal([]byte(stdout), &cs) == nil && cs.LeaderGRPCAddress != "", stdout + stderr
	})
	sh := docShell{t: t, dir: work, env: []string{"ALLOT_COORDINATOR=" + addrs[1]},
		subst: []string{"/srv/runtime_data/current/ratelimit/config", config}}
	checkDocTranscript(t, doc, "import", sh.exiting(exitOK), seen)
	checkDocTranscript(t, doc, "import-edge", sh.exiting(exitOK), seen)
	checkDocTranscript(t, doc, "import-bad", sh.exiting(exitUsage), seen)
	requireDocOutputsSeen(t, gatewayDoc, doc, seen)
}
