package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// rulesDocMistakes are the files of docs/rules.md's first-file mistakes,
// which the page names but does not show.
var rulesDocMistakes = map[string]string{
	"daily.yaml":  "rules:\n  - name: daily\n    scope: tenant\n    algorithm: fixed_window\n    limit: 10000\n    period: 1d\n    intent: quota\n",
	"nolist.yaml": "- name: daily\n  scope: tenant\n  algorithm: fixed_window\n  limit: 10000\n  period: 24h\n  intent: quota\n",
	"twice.yaml": "rules:\n  - name: daily\n    scope: tenant\n    algorithm: fixed_window\n    limit: 10000\n    period: 24h\n    intent: quota\n" +
		"rules:\n  - name: hourly\n    scope: tenant\n    algorithm: fixed_window\n    limit: 500\n    period: 1h\n    intent: quota\n",
}

// TestRulesDocExamples runs docs/rules.md's allot rules commands on the
// files the page shows, offline and against a one-member cluster in
// eu-west, and checks that they print what the page says, with the exit
// codes it gives.
func TestRulesDocExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a coordinator")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	const path = "../../docs/rules.md"
	doc := readDocOutputs(t, path)
	seen := map[string]bool{}
	blocks, err := readDocBlocks(path)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	files := map[string]string{}
	for name, text := range rulesDocMistakes {
		files[name] = text
	}
	for _, name := range []string{"regions.yaml", "bad.yaml", "quota.yaml"} {
		b, ok := blocks[name]
		if !ok {
			t.Fatalf("%s: no block marked %s%s", path, docFileMarker, name)
		}
		files[name] = b.text
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	addrs := loopbackAddrs(t, 2)
	eu := startProcess(t, cliEnv(), "euw-1", "coordinator", "--node-id", "euw-1", "--region", "eu-west", "--data-dir", t.TempDir(),
		"--bootstrap", "--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", "")
	eventually(t, "euw-1 leading", []*process{eu}, func() (bool, string) {
		code, stdout, stderr := runAllot(t, cliEnv(), "status", "--format", "json", "--coordinator", addrs[1])
		var cs clusterStatus
		return code == exitOK && json.Unmarshal([]byte(stdout), &cs) == nil && cs.LeaderGRPCAddress != "", stdout + stderr
	})

	sh := docShell{t: t, dir: work, env: []string{"ALLOT_COORDINATOR=" + addrs[1]}}
	checkDocTranscript(t, doc, "validate-regions", sh.exiting(exitOK), seen)
	checkDocTranscript(t, doc, "validate-example", docShell{t: t, dir: "../.."}.exiting(exitOK), seen)
	checkDocTranscript(t, doc, "validate-bad", sh.exiting(exitUsage), seen)
	checkDocTranscript(t, doc, "validate-mistakes", sh.exiting(exitUsage), seen)
	checkDocTranscript(t, doc, "put-again", sh.exiting(exitOK), seen) // after validate-regions' put
	requireDocOutputsSeen(t, path, doc, seen)
}
