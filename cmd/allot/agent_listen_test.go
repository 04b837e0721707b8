package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/client/sidecarclient"
	"github.com/allot-io/allot/internal/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// TestSidecarFlagsRefused: a sidecar that would decide checks beyond
// loopback without a credential for its callers does not start, nor one
// whose start-up flags contradict each other; each says what to do.
func TestSidecarFlagsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	t.Parallel() // its own processes, ports and directories: see TestMain
	dir := t.TempDir()
	ca, err := auth.NewCA(dir, "ca", "allot.test")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue(auth.Leaf{File: "sidecar", CommonName: "sidecar", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	good := writeTemp(t, "rules.yaml", "rules:\n"+ruleText("a"))
	bad := writeTemp(t, "bad.yaml", "rules:\n"+strings.Replace(ruleText("a"), "period: 1m", "period: -1s", 1))
	coordinated := []string{"agent", "--coordinators", "127.0.0.1:1", "--node-id", "gw-1"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"http beyond loopback", []string{"--http-addr", "0.0.0.0:7600"},
			"--http-addr 0.0.0.0:7600 is not a loopback address and no credential is configured for its callers: anyone who reaches it could spend tenants' limits"},
		{"every interface", []string{"--http-addr", ":7600"}, "--http-addr :7600 is not a loopback address"},
		{"grpc beyond loopback", []string{"--grpc-addr", "10.0.0.7:8081"}, "--grpc-addr 10.0.0.7:8081 is not a loopback address and no credential"},
		{"TLS without client certificates", []string{"--http-addr", "0.0.0.0:7600", "--http-cert", cert.CertFile, "--http-key", cert.KeyFile},
			"--http-addr 0.0.0.0:7600 is not a loopback address and --http-cert encrypts but does not say who may call: require client certificates with --http-client-ca, or pass --insecure"},
		{"client CA without TLS", []string{"--http-client-ca", ca.File}, "--http-client-ca verifies callers over TLS: it needs --http-cert and --http-key"},
		{"static without a file", []string{"--until-rules", "static"}, "static needs the rules file to enforce until the cluster's arrive: static:FILE"},
		{"unknown policy", []string{"--until-rules", "shut"}, `invalid value "shut" for flag -until-rules: want closed, open or static:FILE`},
		{"a file for open", []string{"--until-rules", "open:" + good}, "only static takes a file"},
		{"a bad start-up file", []string{"--until-rules", "static:" + bad}, "--until-rules static: rules: " + bad + ":6: rule a: period: must be positive"},
		{"a policy with --rules", []string{"--rules", good, "--until-rules", "open"}, "--until-rules: the --rules file is enforced from the start"},
		{"a cache with --rules", []string{"--rules", good, "--rules-cache", dir + "/c.json"}, "--rules-cache caches the cluster's rules"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runAllot(t, cliEnv(), append(coordinated, tt.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d and %q", code, stdout, stderr, exitUsage, tt.want)
			}
		})
	}
}

// TestSidecarClientCertificates: beyond loopback with TLS and client
// certificates, a caller with a certificate the --http-client-ca signed
// is answered over HTTPS and gRPC, one without is not; --probe-addr serves
// the probes and the metrics in plain HTTP, and no check. With --insecure
// a sidecar beyond loopback starts, and says so.
func TestSidecarClientCertificates(t *testing.T) {
	if testing.Short() {
		t.Skip("runs sidecar processes")
	}
	dir := t.TempDir()
	ca, err := auth.NewCA(dir, "ca", "allot.test")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue(auth.Leaf{File: "sidecar", CommonName: "sidecar", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	gateway, err := ca.Issue(auth.Leaf{File: "gateway", CommonName: "gateway"})
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := writeTemp(t, "rules.yaml", "rules:\n"+ruleText("quota"))
	ports := loopbackAddrs(t, 4)
	everywhere := func(i int) string { _, port, _ := net.SplitHostPort(ports[i]); return "0.0.0.0:" + port }
	local := func(i int) string { _, port, _ := net.SplitHostPort(ports[i]); return "127.0.0.1:" + port }
	p := startProcess(t, cliEnv(), "sidecar", "agent", "--rules", rulesFile, "--node-id", "gw-1", "--http-addr", everywhere(0), "--grpc-addr", everywhere(1),
		"--http-cert", server.CertFile, "--http-key", server.KeyFile, "--http-client-ca", ca.File, "--probe-addr", ports[2])

	withCert, err := auth.NewReloader(auth.TLSFiles{CertFile: gateway.CertFile, KeyFile: gateway.KeyFile, CAFile: ca.File}, nil)
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := auth.NewReloader(auth.TLSFiles{CAFile: ca.File}, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := func(r *auth.Reloader) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: r.ClientConfig(), DisableKeepAlives: true}}
	}
	eventually(t, "the probe listener", []*process{p}, func() (bool, string) { return httpOK("http://" + ports[2] + "/readyz") })
	resp, err := client(withCert).Post("https://"+local(0)+"/v1/check", "application/json", strings.NewReader(`{"tenant":"acme"}`))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a check with a client certificate: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err := client(noCert).Post("https://"+local(0)+"/v1/check", "application/json", strings.NewReader(`{"tenant":"acme"}`)); err == nil {
		resp.Body.Close()
		t.Errorf("a check without a client certificate answered %s", resp.Status)
	}
	for path, want := range map[string]int{"/livez": 200, "/readyz": 200, "/healthz": 200, "/metrics": 200, "/v1/check": 404, "/v1/authz": 404, "/v1/status": 404} {
		if a := sidecarDo(t, http.MethodGet, "http://"+ports[2]+path, ""); a.code != want {
			t.Errorf("--probe-addr %s: %d, want %d", path, a.code, want)
		}
	}

	grpcCheck := func(r *auth.Reloader) (agent.Decision, error) {
		c, err := sidecarclient.New(local(1), grpc.WithTransportCredentials(credentials.NewTLS(r.ClientConfig())))
		if err != nil {
			return agent.Decision{}, err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Check(ctx, agent.Request{Tenant: "acme"})
	}
	if d, err := grpcCheck(withCert); err != nil || !d.Allowed {
		t.Errorf("gRPC with a client certificate: %+v, %v", d, err)
	}
	if d, err := grpcCheck(noCert); err == nil {
		t.Errorf("gRPC without a client certificate answered %+v", d)
	}
	p.stop(t)

	open := startProcess(t, cliEnv(), "insecure sidecar", "agent", "--rules", rulesFile, "--node-id", "gw-1", "--http-addr", everywhere(3), "--insecure")
	eventually(t, "the --insecure sidecar", []*process{open}, func() (bool, string) { return httpOK("http://" + local(3) + "/readyz") })
	waitOutput(t, open, "[WARN]  allot-agent: deciding checks beyond loopback for any caller (--insecure)")
	open.stop(t)
}
