package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/auth"
)

// TestSecurityDocExamples runs docs/security.md's commands and the
// mistakes it describes, on loopback: the tokens made and rotated, the
// coordinators refusing to start, a command's credential errors against a
// coordinator with TLS and tokens and against one without, the refusals
// logged, and each credential file replaced by a bad one while in use.
func TestSecurityDocExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("runs coordinators and sidecars")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	const path = "../../docs/security.md"
	doc := readDocOutputs(t, path)
	seen := map[string]bool{}
	work := t.TempDir()
	sh := docShell{t: t, dir: work}

	checkDocTranscript(t, doc, "tokens-create", sh.exiting(exitOK), seen)
	checkDocTranscript(t, doc, "tokens-rotate", sh.exiting(exitOK), seen)
	checkDocTranscript(t, doc, "insecure", sh.exiting(exitUsage), seen)
	checkDocTranscript(t, doc, "raft-insecure", sh.exiting(exitUsage), seen)
	checkDocTranscript(t, doc, "tokens-in-clear", sh.exiting(exitUsage), seen)
	// The mistake the page warns of: allot token's output appended.
	twice := docShell{t: t, dir: t.TempDir()}
	twice.exiting(exitOK)("allot token --name ops --role admin --append tokens.yaml --out ops.token && " +
		"allot token --name billing --role reader --out billing.token >> tokens.yaml")
	checkDocTranscript(t, doc, "tokens-twice", twice.exiting(exitUsage), seen)

	pki := filepath.Join(work, "pki")
	if err := os.Mkdir(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	ca, err := auth.NewCA(pki, "ca", "allot.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.NewCA(pki, "other-ca", "other.example.com"); err != nil {
		t.Fatal(err)
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	var c1Cert, c3Cert, agentCert, sidecarCert auth.Issued
	for _, issue := range []struct {
		to   *auth.Issued
		leaf auth.Leaf
	}{
		{&c1Cert, auth.Leaf{File: "c1", Role: auth.Member, Name: "c1", CommonName: "c1", IPs: loopback}},
		{&c3Cert, auth.Leaf{File: "c3", Role: auth.Member, Name: "c3", CommonName: "c3", IPs: loopback}},
		{&agentCert, auth.Leaf{File: "gw-eu-17", Role: auth.Agent, Name: "gw-eu-17", CommonName: "gw-eu-17"}},
		{&sidecarCert, auth.Leaf{File: "sidecar", CommonName: "sidecar", IPs: loopback}},
	} {
		if *issue.to, err = ca.Issue(issue.leaf); err != nil {
			t.Fatal(err)
		}
	}
	sh.exiting(exitOK)("allot token --name stale --role admin --out stale.token")

	// c1: TLS and tokens, with files of its own to break later. plain: no
	// credentials. c2 and c3 each log one refusal: refusals are logged
	// once a minute per peer address, and every call here is from
	// 127.0.0.1.
	c1Dir := t.TempDir()
	tokens, err := os.ReadFile(filepath.Join(work, "tokens.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c1Tokens := filepath.Join(c1Dir, "tokens.yaml")
	replaceFile(t, c1Tokens, tokens)
	addrs := loopbackAddrs(t, 10)
	coordinator := func(name string, raft, grpc int, extra ...string) *process {
		return startProcess(t, cliEnv(), name, append([]string{"coordinator", "--node-id", name, "--data-dir", t.TempDir(), "--bootstrap",
			"--raft-addr", addrs[raft], "--grpc-addr", addrs[grpc], "--http-addr", "", "--report-interval", "200ms"}, extra...)...)
	}
	c1 := coordinator("c1", 0, 1, "--cert", c1Cert.CertFile, "--key", c1Cert.KeyFile, "--ca", ca.File, "--auth-tokens", c1Tokens)
	plain := coordinator("plain", 2, 3)
	c2 := coordinator("c2", 4, 5, "--auth-tokens", filepath.Join(work, "tokens.yaml"))
	c3 := coordinator("c3", 6, 7, "--cert", c3Cert.CertFile, "--key", c3Cert.KeyFile, "--ca", ca.File, "--auth-tokens", filepath.Join(work, "tokens.yaml"))
	procs := []*process{c1, plain, c2, c3}
	ops := filepath.Join(work, "ops.token")
	for _, c := range []struct {
		p    *process
		args []string
	}{
		{c1, []string{"--coordinator", addrs[1], "--ca", ca.File, "--token-file", ops}},
		{plain, []string{"--coordinator", addrs[3]}},
		{c2, []string{"--coordinator", addrs[5], "--token-file", ops}},
		{c3, []string{"--coordinator", addrs[7], "--ca", ca.File, "--token-file", ops}},
	} {
		eventually(t, c.p.name+" leading", procs, func() (bool, string) {
			code, stdout, stderr := runAllot(t, cliEnv(), append([]string{"status"}, c.args...)...)
			return code == exitOK && strings.Contains(stdout, "leader "+c.p.name), stdout + stderr
		})
	}

	checkDocTranscript(t, doc, "status-tls", docShell{t: t, dir: work, env: []string{"ALLOT_COORDINATOR=" + addrs[1]}}.exiting(exitFailure), seen)
	checkDocTranscript(t, doc, "status-plaintext", docShell{t: t, dir: work, env: []string{"ALLOT_COORDINATOR=" + addrs[3]}}.exiting(exitFailure), seen)
	checkDocOutput(t, doc, "no-credentials", lineWith(plain.out.String(), "no credentials configured"), seen)

	// A gateway's token used as another node, and an agent's certificate
	// asking for the cluster's status.
	wrongNode := startProcess(t, cliEnv(), "gw-us-1", "agent", "--coordinators", addrs[5], "--node-id", "gw-us-1", "--region", "eu-west",
		"--token-file", filepath.Join(work, "gw-eu.token"), "--http-addr", addrs[8], "--report-interval", "200ms")
	procs = append(procs, wrongNode)
	eventually(t, "c2 to refuse gw-us-1", procs, func() (bool, string) {
		return lineWith(c2.out.String(), "refused a call", "wrong_node") != "", c2.out.String()
	})
	if code, stdout, stderr := runAllot(t, cliEnv(), "status", "--coordinator", addrs[7], "--ca", ca.File,
		"--cert", agentCert.CertFile, "--key", agentCert.KeyFile); code != exitFailure {
		t.Errorf("status with an agent's certificate: exit %d, %s%s", code, stdout, stderr)
	}
	eventually(t, "c3 to log the refusal", procs, func() (bool, string) {
		return lineWith(c3.out.String(), "refused a call", "wrong_role") != "", c3.out.String()
	})
	checkDocOutput(t, doc, "refused-log", lineWith(c2.out.String(), "refused a call", "wrong_node")+"\n"+
		lineWith(c3.out.String(), "refused a call", "wrong_role"), seen)

	checkDocOutput(t, doc, "reload-errors", reloadErrors(t, c1, work, c1Dir, c1Tokens, c1Cert, sidecarCert, ca, addrs[1], addrs[9], procs), seen)
	requireDocOutputsSeen(t, path, doc, seen)
}

// reloadErrors runs a sidecar against c1 over TLS with a token, breaks
// c1's tokens file and certificate and the sidecar's token file and
// --http-cert one after the other while they are in use, and returns what
// each logged, the test's directories left out of paths.
func reloadErrors(t *testing.T, c1 *process, work, c1Dir, c1Tokens string, c1Cert, sidecarCert auth.Issued, ca *auth.CA, c1Addr, sidecarAddr string, procs []*process) string {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "gw-eu.token")
	token, err := os.ReadFile(filepath.Join(work, "gw-eu.token.new"))
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, tokenFile, token)
	sidecar := startProcess(t, cliEnv(), "gw-eu-1", "agent", "--coordinators", c1Addr, "--node-id", "gw-eu-1", "--region", "eu-west",
		"--ca", ca.File, "--token-file", tokenFile, "--http-addr", sidecarAddr, "--http-cert", sidecarCert.CertFile,
		"--http-key", sidecarCert.KeyFile, "--report-interval", "200ms")
	procs = append(procs, sidecar)
	r, err := auth.NewReloader(auth.TLSFiles{CAFile: ca.File}, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: r.ClientConfig(), DisableKeepAlives: true}}
	get := func() (bool, string) {
		resp, err := client.Get("https://" + sidecarAddr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	}
	eventually(t, "the sidecar ready over HTTPS", procs, get)
	logged := func(p *process, what string, poke func()) string {
		t.Helper()
		eventually(t, p.name+" to log "+what, procs, func() (bool, string) {
			if poke != nil {
				poke()
			}
			return lineWith(p.out.String(), what) != "", p.out.String()
		})
		return lineWith(p.out.String(), what)
	}
	status := func() {
		runAllot(t, cliEnv(), "status", "--coordinator", c1Addr, "--ca", ca.File, "--token-file", filepath.Join(work, "ops.token"))
	}

	tokens, err := os.ReadFile(c1Tokens)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, c1Tokens, append(tokens, "  - name: ops-2\n    role: admin: reader\n"...))
	lines := []string{logged(c1, "a changed tokens file could not be loaded", nil)}
	replaceFile(t, c1Cert.CertFile, []byte("not a certificate\n"))
	lines = append(lines, logged(c1, "a changed TLS file could not be loaded", status))
	replaceFile(t, tokenFile, nil)
	lines = append(lines, logged(sidecar, "a changed credential file could not be loaded", nil))
	replaceFile(t, sidecarCert.CertFile, []byte("not a certificate\n"))
	lines = append(lines, logged(sidecar, "could not be loaded", func() { get() }))
	return strings.NewReplacer(c1Dir+string(filepath.Separator), "", filepath.Dir(tokenFile)+string(filepath.Separator), "",
		filepath.Dir(sidecarCert.CertFile)+string(filepath.Separator), "pki/").Replace(strings.Join(lines, "\n"))
}

// replaceFile replaces path by a file holding data, as the page tells
// operators to: written beside it, then renamed over it.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
