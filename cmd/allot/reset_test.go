package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCLIReset: with real processes (a coordinator and a sidecar agent),
// a tenant refused for its spent quota is admitted again after `allot
// reset`; bad input is refused naming the field, and `allot reset list`
// shows the reset with who made it.
func TestCLIReset(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of processes")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	c := startSmallCluster(t, `rules:
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
	admin, reader, at, procs := c.admin, c.reader, c.at, c.procs
	check := func(tenant string) bool { return c.check(t, tenant).Allowed }
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
	// The audit log has it too, by the admin token's name, as a reset
	// with the documented field names (not a JSON string of camelCase).
	code, stdout, stderr = runAllot(t, reader, append([]string{"audit", "--kind", "reset", "--format", "json"}, at...)...)
	var entry struct {
		Actor, Action string
		After         struct {
			Resets []struct {
				Rule, Tenant, By, Reason, Version string
				AtUnixNano                        string `json:"at_unix_nano"`
			}
		}
	}
	if code != exitOK || json.Unmarshal([]byte(stdout), &entry) != nil || entry.Actor != "admin" || entry.Action != "ResetKeys" ||
		len(entry.After.Resets) != 1 || entry.After.Resets[0] != (struct {
		Rule, Tenant, By, Reason, Version string
		AtUnixNano                        string `json:"at_unix_nano"`
	}{"tenant-quota", "acme", "admin", "case 42", "1", entry.After.Resets[0].AtUnixNano}) || entry.After.Resets[0].AtUnixNano == "" {
		t.Errorf("audit --kind reset: exit %d, %s%s; want the reset under after.resets", code, stdout, stderr)
	}
}
