package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// regionRules are three rules: one every region enforces, one divided
// between eu-west and us-east, and one for us-east alone.
const regionRules = `rules:
  - name: everywhere
    scope: tenant
    algorithm: fixed_window
    limit: 100
    period: 1m
    intent: quota
  - name: split
    scope: global
    algorithm: token_bucket
    limit: 1000
    period: 1s
    burst: 100
    intent: capacity
    regions: {eu-west: 0.5, us-east: 0.5}
  - name: us-only
    scope: tenant
    algorithm: fixed_window
    limit: 10
    period: 1m
    intent: quota
    regions: {us-east: 1}
`

// TestRulesRegionWarnings: a rule whose regions leave out the cluster's
// region is enforced nowhere in it; allot rules put says so, per rule,
// where it printed "created us-only" alone, and allot rules validate
// --region says so offline.
func TestRulesRegionWarnings(t *testing.T) {
	if testing.Short() {
		t.Skip("runs coordinators")
	}
	file := writeTemp(t, "rules.yaml", regionRules)
	warning := func(region string) string {
		return "warning: " + file + ":22: rules[us-only].regions: not enforced in region " + region +
			", which it gives no share (it divides its limit among us-east): requests there pass it unchecked; add " + region +
			" to regions, or put the rule on the clusters of those regions only\n"
	}

	t.Run("validate", func(t *testing.T) {
		tests := []struct {
			region, stdout, stderr string
		}{
			{"", "ok: 3 rules\n", ""},
			{"us-east", "ok: 3 rules\n", ""},
			{"eu-west", "ok: 3 rules, 1 not enforced in region eu-west\n", warning("eu-west")},
			{"ap-south", "ok: 3 rules, 2 not enforced in region ap-south\n",
				"warning: " + file + ":15: rules[split].regions: not enforced in region ap-south, which it gives no share (it divides its limit among eu-west, us-east): requests there pass it unchecked; add ap-south to regions, or put the rule on the clusters of those regions only\n" + warning("ap-south")},
		}
		for _, tt := range tests {
			args := []string{"rules", "validate", file}
			if tt.region != "" {
				args = append(args, "--region", tt.region)
			}
			code, stdout, stderr := runIn(t, nil, args...)
			if code != exitOK || stdout != tt.stdout || stderr != tt.stderr {
				t.Errorf("validate --region %q: exit %d\nstdout %q\nstderr %q\nwant 0\nstdout %q\nstderr %q", tt.region, code, stdout, stderr, tt.stdout, tt.stderr)
			}
		}
		bad := writeTemp(t, "bad.yaml", strings.Replace(regionRules, "period: 1s", "period: 1d", 1))
		if code, _, stderr := runIn(t, nil, "rules", "validate", bad, "--region", "eu-west"); code != exitUsage || !strings.Contains(stderr, `rules[split].period: "1d"`) {
			t.Errorf("validate --region of a bad file: exit %d, %q; want 2 and the problem", code, stderr)
		}
	})

	t.Run("put", func(t *testing.T) {
		addrs := loopbackAddrs(t, 4)
		eu := startProcess(t, cliEnv(), "eu-west", "coordinator", "--node-id", "eu1", "--region", "eu-west", "--data-dir", t.TempDir(), "--bootstrap",
			"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", "")
		parent := startProcess(t, cliEnv(), "parent", "coordinator", "--node-id", "p1", "--region", "global", "--global", "--data-dir", t.TempDir(), "--bootstrap",
			"--raft-addr", addrs[2], "--grpc-addr", addrs[3], "--http-addr", "")
		procs := []*process{eu, parent}
		for _, addr := range []string{addrs[1], addrs[3]} {
			eventually(t, addr+" leading", procs, func() (bool, string) {
				code, stdout, stderr := runAllot(t, cliEnv(), "status", "--format", "json", "--coordinator", addr)
				var cs clusterStatus
				return code == exitOK && json.Unmarshal([]byte(stdout), &cs) == nil && cs.LeaderGRPCAddress != "", stdout + stderr
			})
		}
		created := func(stdout string) bool {
			return strings.HasPrefix(stdout, "rules version 1 (3 rules): created ") && strings.Contains(stdout, "everywhere") &&
				strings.Contains(stdout, "split") && strings.Contains(stdout, "us-only")
		}
		code, stdout, stderr := runAllot(t, cliEnv(), "rules", "put", file, "--coordinator", addrs[1])
		if code != exitOK || !created(stdout) || stderr != warning("eu-west") {
			t.Errorf("put to eu-west: exit %d\nstdout %q\nstderr %q\nwant the rules created and\n%q", code, stdout, stderr, warning("eu-west"))
		}
		// A parent divides every rule among the regions: nothing to warn of.
		code, stdout, stderr = runAllot(t, cliEnv(), "rules", "put", file, "--coordinator", addrs[3])
		if code != exitOK || !created(stdout) || stderr != "" {
			t.Errorf("put to a parent: exit %d, stdout %q, stderr %q; want no warning", code, stdout, stderr)
		}
	})

	// The same file given with --rules: the leader that loads it warns
	// of each rule its region does not enforce, as put does.
	t.Run("load", func(t *testing.T) {
		addrs := loopbackAddrs(t, 2)
		eu := startProcess(t, cliEnv(), "eu-west", "coordinator", "--node-id", "eu1", "--region", "eu-west", "--data-dir", t.TempDir(), "--bootstrap",
			"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", "", "--rules", file)
		eventually(t, "the warning", []*process{eu}, func() (bool, string) {
			out := eu.out.String()
			return strings.Contains(out, "[WARN]  allot.coordinator: rule not enforced in this cluster's region") &&
				strings.Contains(out, "rule=us-only region=eu-west regions=[\"us-east\"]") && !strings.Contains(out, "rule=everywhere") &&
				!strings.Contains(out, "rule=split"), out
		})
	})
}

// TestRegionChangeRefused: a member's data dir records the region it
// serves; started again with another --region, the member refuses to
// start, naming both, where it used to serve the old region's ledger and
// leases as the new one's.
func TestRegionChangeRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a coordinator")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	addrs := loopbackAddrs(t, 2)
	dir := t.TempDir()
	args := func(region string) []string {
		return []string{"coordinator", "--node-id", "c1", "--region", region, "--data-dir", dir, "--bootstrap",
			"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", ""}
	}
	c1 := startProcess(t, cliEnv(), "c1", args("eu-west")...)
	eventually(t, "the region recorded", []*process{c1}, func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(dir, "identity.json"))
		return err == nil && strings.Contains(string(b), `"region": "eu-west"`), string(b)
	})
	c1.stop(t)
	code, _, stderr := runAllot(t, cliEnv(), args("us-east")...)
	if code == exitOK || !strings.Contains(stderr, "holds the state of region eu-west") || !strings.Contains(stderr, "started with --region us-east") {
		t.Fatalf("restarted with --region us-east: exit %d, stderr %q; want a refusal naming both regions", code, stderr)
	}
	c1 = startProcess(t, cliEnv(), "c1 again", args("eu-west")...)
	eventually(t, "c1 leading again", []*process{c1}, func() (bool, string) {
		code, stdout, stderr := runAllot(t, cliEnv(), "status", "--format", "json", "--coordinator", addrs[1])
		var cs clusterStatus
		return code == exitOK && json.Unmarshal([]byte(stdout), &cs) == nil && cs.LeaderGRPCAddress != "", stdout + stderr
	})
}
