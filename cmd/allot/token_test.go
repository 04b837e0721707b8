package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allot-io/allot/internal/auth"
)

// TestTokenAppend builds a tokens file with allot token --append, as
// docs/security.md does, makes a rotation's successor with --like, refuses
// what would break the file, and starts a coordinator on the result: every
// token made is accepted, the first (the admin's) included.
func TestTokenAppend(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary and a coordinator")
	}
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	tok := func(name string) string { return filepath.Join(dir, name+".token") }
	run := func(args ...string) (int, string, string) {
		t.Helper()
		return runAllot(t, cliEnv(), append([]string{"token"}, args...)...)
	}
	read := func() string {
		t.Helper()
		b, err := os.ReadFile(tokens)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	parse := func() *auth.Tokens {
		t.Helper()
		got, err := auth.ParseTokens(tokens, []byte(read()))
		if err != nil {
			t.Fatalf("the file allot token wrote does not parse: %v\n%s", err, read())
		}
		return got
	}

	// A new file, mode 0600.
	code, stdout, stderr := run("--name", "ops", "--role", "admin", "--append", tokens, "--out", tok("ops"))
	if code != exitOK || !strings.Contains(stdout, "# entry added to "+tokens+" (1 token)") {
		t.Fatalf("first append: exit %d, %q, %q", code, stdout, stderr)
	}
	if fi, err := os.Stat(tokens); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new tokens file: %v, mode %v; want 0600", err, fi.Mode())
	}
	// Another entry, in a file whose owner has made it group-readable and
	// put a comment in: both are kept, and the file has one tokens: list.
	if err := os.WriteFile(tokens, []byte("# Allot's tokens: deploy to every member.\n"+read()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tokens, 0o640); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = run("--name", "gateways-eu", "--role", "agent", "--nodes", "gw-eu-*", "--regions", "eu-west", "--append", tokens, "--out", tok("gw-eu"))
	if code != exitOK || !strings.Contains(stdout, "(2 tokens)") || !strings.Contains(stdout, "- name: gateways-eu\n  role: agent\n  nodes: gw-eu-*\n  regions: eu-west\n  sha256: ") {
		t.Fatalf("second append: exit %d, %q, %q", code, stdout, stderr)
	}
	if fi, _ := os.Stat(tokens); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v after an append; want the file's 0640 kept", fi.Mode().Perm())
	}
	if body := read(); strings.Count(body, "tokens:") != 2 || !strings.HasPrefix(body, "# Allot's tokens: deploy to every member.\ntokens:\n") {
		t.Errorf("want the comment kept and one tokens: list:\n%s", body)
	}

	// Rotation: the successor may do exactly what gateways-eu may.
	code, stdout, stderr = run("--name", "gateways-eu-2", "--like", "gateways-eu", "--append", tokens, "--out", tok("gw-eu-2"))
	if code != exitOK || !strings.Contains(stdout, "(3 tokens)") {
		t.Fatalf("--like: exit %d, %q, %q", code, stdout, stderr)
	}
	table := parse()
	old, _ := table.Lookup(fleetToken(t, tok("gw-eu")))
	succ, ok := table.Lookup(fleetToken(t, tok("gw-eu-2")))
	if !ok || succ.Name != "gateways-eu-2" || succ.Role != old.Role || succ.NodeGlob != "gw-eu-*" || succ.RegionGlob != "eu-west" {
		t.Errorf("--like gateways-eu made %+v; want the role, nodes and regions of %+v", succ, old)
	}

	// A balance token is bound to its tenant, and its successor to the
	// same one.
	code, stdout, stderr = run("--name", "dash-acme", "--role", "balance", "--tenant", "acme", "--append", tokens, "--out", tok("dash-acme"))
	if code != exitOK || !strings.Contains(stdout, "- name: dash-acme\n  role: balance\n  tenant: acme\n  sha256: ") {
		t.Fatalf("a balance token: exit %d, %q, %q", code, stdout, stderr)
	}
	code, stdout, stderr = run("--name", "dash-acme-2", "--like", "dash-acme", "--append", tokens, "--out", tok("dash-acme-2"))
	if succ, ok := parse().Lookup(fleetToken(t, tok("dash-acme-2"))); code != exitOK || !ok || succ.Role != auth.Balance || succ.Tenant != "acme" {
		t.Errorf("--like dash-acme: exit %d, %q, %q; made %+v", code, stdout, stderr, succ)
	}

	// What must be refused leaves the file and the token files as they
	// were.
	before := read()
	refusals := []struct {
		name string
		args []string
		want string
	}{
		{"a name already listed", []string{"--name", "ops", "--role", "reader", "--append", tokens, "--out", tok("ops-again")},
			tokens + `:3: a token named "ops" is already listed; names are unique in the file: choose another (to rotate it, --like ops)`},
		{"--like an unknown name", []string{"--name", "x", "--like", "nobody", "--append", tokens, "--out", tok("x")},
			`--like "nobody": ` + tokens + " has no such entry (it lists ops, gateways-eu, gateways-eu-2, dash-acme, dash-acme-2)"},
		{"a balance token without its tenant", []string{"--name", "x", "--role", "balance", "--append", tokens, "--out", tok("x")},
			"x: a balance token needs tenant, the one tenant whose balance it may read"},
		{"--like with --role", []string{"--name", "x", "--like", "ops", "--role", "reader", "--append", tokens, "--out", tok("x")},
			`--like copies --role, --nodes, --regions and --tenant from "ops": give either --like or those`},
		{"--like without --append", []string{"--name", "x", "--like", "ops", "--out", tok("x")},
			`--like needs --append FILE, the tokens file that lists "ops"`},
	}
	for _, r := range refusals {
		code, stdout, stderr := run(r.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, r.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 2 and %q", r.name, code, stdout, stderr, r.want)
		}
		if read() != before {
			t.Errorf("%s changed the file", r.name)
		}
	}
	for _, f := range []string{"ops-again", "x"} {
		if _, err := os.Stat(tok(f)); !os.IsNotExist(err) {
			t.Errorf("a refused command left %s behind", tok(f))
		}
	}
	// A file the coordinators would refuse is not added to.
	broken := filepath.Join(dir, "broken.yaml")
	if err := os.WriteFile(broken, []byte(before+"tokens:\n  - {name: late, role: reader, token: aaaaaaaaaaaaaaaaaaaa}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = run("--name", "y", "--role", "reader", "--append", broken, "--out", tok("y"))
	if code != exitUsage || !strings.Contains(stderr, broken+":24: tokens is given twice (first on line 2)") || !strings.Contains(stderr, "nothing was written") {
		t.Errorf("appending to a broken file: exit %d, %q", code, stderr)
	}

	// A flow list is re-encoded, its entries kept.
	flow := filepath.Join(dir, "flow.yaml")
	if err := os.WriteFile(flow, []byte("tokens: [{name: a, role: reader, token: aaaaaaaaaaaaaaaaaaaa}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := run("--name", "b", "--role", "reader", "--append", flow, "--out", tok("b")); code != exitOK || !strings.Contains(stdout, "(2 tokens)") {
		t.Errorf("appending to a flow list: exit %d, %q, %q", code, stdout, stderr)
	}

	// The coordinator takes the file, and every token made is accepted:
	// the admin's, appended first, included.
	addrs := loopbackAddrs(t, 2)
	c := startProcess(t, cliEnv(), "coordinator", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", "", "--auth-tokens", tokens)
	eventually(t, "the admin token accepted", []*process{c}, func() (bool, string) {
		code, stdout, stderr := runAllot(t, cliEnv("ALLOT_TOKEN_FILE="+tok("ops")), "rules", "get", "--coordinator", addrs[1])
		return code == exitOK, stdout + stderr
	})
	for _, name := range []string{"gw-eu", "gw-eu-2"} { // agents may read rules
		if code, stdout, stderr := runAllot(t, cliEnv("ALLOT_TOKEN_FILE="+tok(name)), "rules", "get", "--coordinator", addrs[1]); code != exitOK {
			t.Errorf("%s's token: exit %d, %q, %q", name, code, stdout, stderr)
		}
	}
	// A balance token reads its tenant's balance (allot balance), and
	// no other tenant's.
	dash := cliEnv("ALLOT_TOKEN_FILE=" + tok("dash-acme-2"))
	if code, stdout, stderr := runAllot(t, dash, "balance", "acme", "--coordinator", addrs[1]); code != exitOK || !strings.Contains(stdout, "tenant acme: no rule keyed by the tenant alone applies") {
		t.Errorf("allot balance acme with acme's token: exit %d, %q, %q", code, stdout, stderr)
	}
	if code, stdout, stderr := runAllot(t, dash, "balance", "initech", "--coordinator", addrs[1]); code == exitOK || !strings.Contains(stderr, "may not read that tenant's balance") {
		t.Errorf("allot balance initech with acme's token: exit %d, %q, %q", code, stdout, stderr)
	}
}

// fleetToken reads a token file.
func fleetToken(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
