package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allot-io/allot/internal/auth"
)

// TestDialErrorsExplained runs coordinators with and without TLS and
// tokens, as processes, and calls them with the mistakes an operator makes
// on the first day: each is one line saying what is wrong and which flag
// or variable fixes it, not gRPC's "error reading server preface: EOF".
func TestDialErrorsExplained(t *testing.T) {
	if testing.Short() {
		t.Skip("runs coordinators")
	}
	dir := t.TempDir()
	ca, err := auth.NewCA(dir, "allot-ca", "allot.test")
	if err != nil {
		t.Fatal(err)
	}
	member, err := ca.IssueMember("c1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := auth.NewCA(t.TempDir(), "other-ca", "other.test")
	if err != nil {
		t.Fatal(err)
	}
	tokensFile, files, err := auth.IssueTokens(dir, auth.TokenSpec{Name: "ops", Role: auth.Admin})
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "stale.token")
	if err := os.WriteFile(stale, []byte(auth.NewToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := loopbackAddrs(t, 4)
	secure := startProcess(t, cliEnv(), "tls", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", "",
		"--cert", member.CertFile, "--key", member.KeyFile, "--ca", ca.File, "--auth-tokens", tokensFile)
	plain := startProcess(t, cliEnv(), "plaintext", "coordinator", "--node-id", "p1", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", addrs[2], "--grpc-addr", addrs[3], "--http-addr", "", "--auth-tokens", tokensFile)
	procs := []*process{secure, plain}
	tlsAddr, plainAddr := addrs[1], addrs[3]
	for _, c := range []struct{ name, addr, ca string }{{"tls", tlsAddr, ca.File}, {"plaintext", plainAddr, ""}} {
		eventually(t, c.name+" coordinator answering", procs, func() (bool, string) {
			args := []string{"status", "--coordinator", c.addr, "--token-file", files["ops"]}
			if c.ca != "" {
				args = append(args, "--ca", c.ca)
			}
			code, stdout, stderr := runAllot(t, cliEnv(), args...)
			return code == exitOK, stdout + stderr
		})
	}

	tests := []struct {
		name string
		env  []string
		args []string
		want string // the whole of stderr, but for the command's own prefix
	}{
		{"TLS server dialled in plaintext", nil, []string{"status", "--coordinator", tlsAddr, "--token-file", files["ops"]},
			tlsAddr + " speaks TLS: pass --ca FILE (or ALLOT_CA) with the CA that signed its certificate"},
		{"the same from rules get", nil, []string{"rules", "get", "--coordinator", tlsAddr},
			tlsAddr + " speaks TLS: pass --ca FILE (or ALLOT_CA) with the CA that signed its certificate"},
		{"the same from usage", nil, []string{"usage", "--from", "1h", "--coordinator", tlsAddr},
			tlsAddr + " speaks TLS: pass --ca FILE (or ALLOT_CA) with the CA that signed its certificate"},
		{"plaintext server dialled with TLS", []string{"ALLOT_CA=" + ca.File}, []string{"status", "--coordinator", plainAddr, "--token-file", files["ops"]},
			plainAddr + " speaks plaintext, not TLS: it has no certificate: leave out --ca and --cert (and ALLOT_CA, ALLOT_CERT), or start it with --cert and --key"},
		{"another CA", nil, []string{"status", "--coordinator", tlsAddr, "--ca", other.File, "--token-file", files["ops"]},
			tlsAddr + " presents a certificate signed by a CA this client does not trust: " + other.File + " is not the CA that signed it: pass --ca FILE (or ALLOT_CA) with the one that did"},
		{"no token", nil, []string{"status", "--coordinator", tlsAddr, "--ca", ca.File},
			"not allowed: " + tlsAddr + " requires a credential: pass --token-file FILE (or ALLOT_TOKEN_FILE) with a token its --auth-tokens file lists (allot token makes one), or --cert and --key"},
		{"a token it does not list", []string{"ALLOT_TOKEN_FILE=" + stale}, []string{"status", "--coordinator", tlsAddr, "--ca", ca.File},
			"not allowed: " + tlsAddr + " refused the credential: its --auth-tokens file does not list the token in " + stale + " (removed, rotated, or another cluster's?): pass --token-file (or ALLOT_TOKEN_FILE) with a current one"},
		{"a refused --admin-token", nil, []string{"status", "--coordinator", plainAddr, "--admin-token", auth.NewToken()},
			"not allowed: " + plainAddr + " refused the credential: it does not accept the --admin-token value (or ALLOT_ADMIN_TOKEN): pass --token-file FILE (or ALLOT_TOKEN_FILE) with a token its --auth-tokens file lists"},
		{"no token, plaintext", nil, []string{"rules", "get", "--coordinator", plainAddr},
			"not allowed: " + plainAddr + " requires a credential: pass --token-file FILE (or ALLOT_TOKEN_FILE) with a token its --auth-tokens file lists (allot token makes one), or --cert and --key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runAllot(t, cliEnv(tt.env...), append(tt.args, "--timeout", "20s")...)
			line := strings.TrimSuffix(stderr, "\n")
			if code != exitFailure || stdout != "" || strings.Contains(line, "\n") || !strings.HasSuffix(line, ": "+tt.want) {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and one line ending\n%s", code, stdout, stderr, tt.want)
			}
		})
	}
}
