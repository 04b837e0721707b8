package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCLIAudit: with a real coordinator, `allot audit` shows an `allot
// rules put` and an `allot overrides put` under the admin token's name,
// newest first, with what they changed; a reader may read it; an unknown
// --kind or a bad --since is a usage error naming the flag.
func TestCLIAudit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a coordinator process")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	tokensFile, tokens := cliTokens(t, "ops-admin=admin", "billing=reader")
	admin := cliEnv("ALLOT_TOKEN_FILE=" + tokens["ops-admin"])
	reader := cliEnv("ALLOT_TOKEN_FILE=" + tokens["billing"])
	addrs := loopbackAddrs(t, 3)
	coord := startProcess(t, admin, "c1", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", addrs[2], "--auth-tokens", tokensFile)
	eventually(t, "c1 /readyz", []*process{coord}, func() (bool, string) { return httpOK("http://" + addrs[2] + "/readyz") })
	at := []string{"--coordinator", addrs[1]}
	rulesFile := writeTemp(t, "rules.yaml", `rules:
  - name: tenant-quota
    scope: tenant
    algorithm: fixed_window
    limit: 5
    period: 1h
    intent: quota
`)
	if code, stdout, stderr := runAllot(t, admin, append([]string{"rules", "put", rulesFile}, at...)...); code != exitOK {
		t.Fatalf("rules put: exit %d, %s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := runAllot(t, admin, append([]string{"overrides", "put", "tenant-quota", "acme", "--limit", "50"}, at...)...); code != exitOK {
		t.Fatalf("overrides put: exit %d, %s%s", code, stdout, stderr)
	}

	code, stdout, stderr := runAllot(t, reader, append([]string{"audit", "--since", "1h", "--actor", "ops-admin", "--format", "json"}, at...)...)
	if code != exitOK {
		t.Fatalf("audit: exit %d, %s%s", code, stdout, stderr)
	}
	var got []auditJSON
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var j auditJSON
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("audit --format json: %v in %q", err, line)
		}
		got = append(got, j)
	}
	if len(got) != 2 {
		t.Fatalf("audit: %d entries, want the 2 changes: %s", len(got), stdout)
	}
	ov, ru := got[0], got[1]
	if ov.Kind != "overrides" || ov.Action != "PutOverrides" || ov.Actor != "ops-admin" || strings.Join(ov.Subjects, ",") != "tenant-quota/acme" ||
		!strings.Contains(string(ov.After), `"limit":"50"`) || ov.Before != nil && strings.Contains(string(ov.Before), "acme") {
		t.Errorf("the overrides put: %+v (after %s)", ov, ov.After)
	}
	if ru.Kind != "rules" || ru.Action != "PutRules" || ru.Actor != "ops-admin" || !strings.Contains(string(ru.After), `"name":"tenant-quota"`) {
		t.Errorf("the rules put: %+v (after %s)", ru, ru.After)
	}

	code, stdout, stderr = runAllot(t, reader, append([]string{"audit", "--kind", "rules"}, at...)...)
	if code != exitOK || !strings.Contains(stdout, "ops-admin") || !strings.Contains(stdout, "PutRules") || strings.Contains(stdout, "PutOverrides") {
		t.Errorf("audit --kind rules: exit %d, %s%s", code, stdout, stderr)
	}

	// A filter nothing matches says so, where it printed a bare header.
	code, stdout, stderr = runAllot(t, reader, append([]string{"audit", "--actor", "nobody"}, at...)...)
	if code != exitOK || stdout != "no entries\n" {
		t.Errorf("audit --actor nobody: exit %d, stdout %q, stderr %q; want \"no entries\"", code, stdout, stderr)
	}
	code, stdout, stderr = runAllot(t, reader, append([]string{"audit", "--actor", "nobody", "--format", "json"}, at...)...)
	if code != exitOK || stdout != "" || stderr != "no entries\n" {
		t.Errorf("audit --actor nobody --format json: exit %d, stdout %q, stderr %q; want nothing on stdout", code, stdout, stderr)
	}

	for _, c := range []struct{ args []string }{
		{[]string{"audit", "--kind", "rule"}},
		{[]string{"audit", "--since", "yesterday"}},
		{[]string{"audit", "--format", "yaml"}},
	} {
		code, _, stderr := runAllot(t, reader, append(c.args, at...)...)
		if code != exitUsage || !strings.Contains(stderr, c.args[1]) {
			t.Errorf("%v: exit %d, %q; want a usage error naming %s", c.args, code, stderr, c.args[1])
		}
	}
}
