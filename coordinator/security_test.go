package coordinator

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/testwait"

	"github.com/allot-io/allot/internal/auth"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// secured is a cluster with every kind of credential configured: member
// certificates between coordinators (mutual TLS on Raft), a tokens file,
// and a CA that verifies client certificates when given.
type secured struct {
	dir    string
	ca     *auth.CA
	nodes  []*Coordinator
	tokens map[string]string // by name: admin, reader, agent (gw-*), west (gw-*, region eu-west only), dash (acme's balance)
	file   string            // the tokens file
}

func newSecured(t *testing.T, n int, mod func(*Config)) *secured {
	t.Helper()
	s := &secured{dir: t.TempDir(), tokens: map[string]string{}}
	var err error
	if s.ca, err = auth.NewCA(s.dir, "test-ca", "allot.test"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"admin", "reader", "agent", "west", "dash"} {
		s.tokens[name] = auth.NewToken()
	}
	s.file = filepath.Join(s.dir, "tokens.yaml")
	s.writeTokens(t, fmt.Sprintf(`tokens:
  - {name: admin, role: admin, token: %q}
  - {name: reader, role: reader, sha256: %q}
  - {name: agent, role: agent, nodes: "gw-*", token: %q}
  - {name: west, role: agent, nodes: "gw-*", regions: eu-west, token: %q}
  - {name: dash, role: balance, tenant: acme, token: %q}
`, s.tokens["admin"], auth.TokenSHA256(s.tokens["reader"]), s.tokens["agent"], s.tokens["west"], s.tokens["dash"]))
	s.nodes = cluster(t, n, func(c *Config) {
		cert := s.issue(t, auth.Leaf{File: c.NodeID, Role: auth.Member, Name: c.NodeID})
		c.TLS = TLSConfig{CertFile: cert.CertFile, KeyFile: cert.KeyFile, CAFile: s.ca.File}
		c.AuthTokensFile = s.file
		if mod != nil {
			mod(c)
		}
	})
	return s
}

// writeTokens replaces the tokens file whole, as an operator's tooling
// would: a new file renamed over the old.
func (s *secured) writeTokens(t *testing.T, body string) {
	t.Helper()
	replaceFile(t, s.file, []byte(body))
}

// replaceFile replaces path whole: a new file renamed over it, as
// certificate and token tooling does.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// issue signs a certificate for localhost and 127.0.0.1.
func (s *secured) issue(t *testing.T, l auth.Leaf) auth.Issued {
	t.Helper()
	if l.CommonName == "" {
		l.CommonName = l.Name
	}
	l.DNSNames = append(l.DNSNames, "localhost")
	l.IPs = []net.IP{net.ParseIP("127.0.0.1")}
	out, err := s.ca.Issue(l)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// conn dials addr over TLS verified against caFile, presenting cert when
// given.
func tlsConn(t *testing.T, addr, caFile string, cert *auth.Issued) *grpc.ClientConn {
	t.Helper()
	files := auth.TLSFiles{CAFile: caFile}
	if cert != nil {
		files.CertFile, files.KeyFile = cert.CertFile, cert.KeyFile
	}
	r, err := auth.NewReloader(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(r.ClientCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// ledgerText is the whole ledger of c, one line per record.
func ledgerText(c *Coordinator) string {
	var lines []string
	c.fsm.Read(func(s *state.State) { lines = dumpLedger(s) })
	return strings.Join(lines, "\n")
}

// usageReport is a report carrying one usage batch of 7 units.
func usageReport(node, region string, seq uint64) *allotpb.ReportRequest {
	now := time.Now()
	return &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: node, Incarnation: 77, Region: region,
		SentUnixNano: now.UnixNano(), IntervalNano: int64(200 * time.Millisecond),
		Usage: &allotpb.UsageBatch{Seq: seq, CutUnixNano: now.UnixNano(), Counts: []*allotpb.UsageCount{
			{Rule: "plan-quota", Tenant: "acme", WindowUnix: now.Unix(), Admitted: 7},
		}},
	}
}

// TestSecurityTable calls every kind of method with every kind of
// credential. What is refused gets the right code and leaves the ledger
// as it was; what is allowed works.
func TestSecurityTable(t *testing.T) {
	s := newSecured(t, 1, nil)
	l := s.nodes[0]
	addr := l.GRPCAddr()
	issued := func(l auth.Leaf) *auth.Issued { c := s.issue(t, l); return &c }
	expired := issued(auth.Leaf{File: "expired", Role: auth.Agent, Name: "gw-1", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	other, err := auth.NewCA(t.TempDir(), "other-ca", "allot.test")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.Issue(auth.Leaf{File: "stranger", Role: auth.Admin, Name: "mallory", DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	conns := map[string]*grpc.ClientConn{
		"none":        tlsConn(t, addr, s.ca.File, nil),
		"expired":     tlsConn(t, addr, s.ca.File, expired),
		"stranger":    tlsConn(t, addr, s.ca.File, &stranger),
		"agent gw-2":  tlsConn(t, addr, s.ca.File, issued(auth.Leaf{File: "gw-2", Role: auth.Agent, Name: "gw-2"})),
		"agent gw-3":  tlsConn(t, addr, s.ca.File, issued(auth.Leaf{File: "gw-3", Role: auth.Agent, Name: "gw-3"})),
		"legacy gw-7": tlsConn(t, addr, s.ca.File, issued(auth.Leaf{File: "legacy", CommonName: "gw-7", DNSNames: []string{"gw-7"}})),
		"reader cert": tlsConn(t, addr, s.ca.File, issued(auth.Leaf{File: "billing", Role: auth.Reader, Name: "billing"})),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	putRules := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := allotpb.NewRulesServiceClient(cc).PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{quotaRule}})
		return err
	}
	if err := putRules(withToken(ctx, s.tokens["admin"]), conns["none"]); err != nil {
		t.Fatalf("the admin putting rules: %v", err)
	}
	seq := uint64(0)
	report := func(node, region string) func(ctx context.Context, cc *grpc.ClientConn) error {
		return func(ctx context.Context, cc *grpc.ClientConn) error {
			seq++
			_, err := allotpb.NewAgentServiceClient(cc).Report(ctx, usageReport(node, region, seq))
			return err
		}
	}
	queryUsage := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := allotpb.NewUsageServiceClient(cc).QueryUsage(ctx, &allotpb.UsageQuery{})
		return err
	}
	clusterStatus := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := allotpb.NewClusterServiceClient(cc).Status(ctx, &allotpb.StatusRequest{})
		return err
	}
	deleteRule := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := allotpb.NewRulesServiceClient(cc).DeleteRule(ctx, &allotpb.DeleteRuleRequest{Name: "plan-quota"})
		return err
	}
	removeMember := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := allotpb.NewClusterServiceClient(cc).Remove(ctx, &allotpb.RemoveRequest{Id: l.ID()})
		return err
	}
	join := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := allotpb.NewClusterServiceClient(cc).Join(ctx, &allotpb.JoinRequest{Id: "intruder", RaftAddress: "127.0.0.1:1", GrpcAddress: "127.0.0.1:2"})
		return err
	}
	backup := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := BackupTo(ctx, allotpb.NewClusterServiceClient(cc), io.Discard)
		return err
	}
	listRules := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := allotpb.NewRulesServiceClient(cc).ListRules(ctx, &allotpb.ListRulesRequest{})
		return err
	}
	health := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	for _, tc := range []struct {
		caller, conn, token, method string
		call                        func(context.Context, *grpc.ClientConn) error
		want                        codes.Code
		writes                      bool // the call adds to the ledger when allowed
	}{
		{"no credential", "none", "", "Report", report("gw-1", "eu-west"), codes.Unauthenticated, false},
		{"no credential", "none", "", "QueryUsage", queryUsage, codes.Unauthenticated, false},
		{"no credential", "none", "", "Join", join, codes.Unauthenticated, false},
		{"no credential", "none", "", "health Check", health, codes.OK, false},
		{"wrong token", "none", "not-a-token-of-ours-at-all", "Report", report("gw-1", "eu-west"), codes.Unauthenticated, false},
		{"wrong token", "none", "not-a-token-of-ours-at-all", "PutRules", putRules, codes.Unauthenticated, false},
		{"expired certificate", "expired", "", "Report", report("gw-1", "eu-west"), codes.Unavailable, false},
		{"certificate of another CA", "stranger", "", "PutRules", putRules, codes.Unavailable, false},
		{"certificate of another node", "agent gw-2", "", "Report as gw-1", report("gw-1", "eu-west"), codes.PermissionDenied, false},
		{"legacy certificate of another node", "legacy gw-7", "", "Report as gw-8", report("gw-8", "eu-west"), codes.PermissionDenied, false},
		{"reader token", "none", "reader", "PutRules", putRules, codes.PermissionDenied, false},
		{"reader token", "none", "reader", "DeleteRule", deleteRule, codes.PermissionDenied, false},
		{"reader token", "none", "reader", "Remove", removeMember, codes.PermissionDenied, false},
		{"reader token", "none", "reader", "Backup", backup, codes.PermissionDenied, false},
		{"reader token", "none", "reader", "Report", report("gw-1", "eu-west"), codes.PermissionDenied, false},
		{"reader certificate", "reader cert", "", "PutRules", putRules, codes.PermissionDenied, false},
		{"agent token", "none", "agent", "QueryUsage", queryUsage, codes.PermissionDenied, false},
		{"agent token", "none", "agent", "Status", clusterStatus, codes.PermissionDenied, false},
		{"agent token", "none", "agent", "PutRules", putRules, codes.PermissionDenied, false},
		{"agent token", "none", "agent", "Join", join, codes.PermissionDenied, false},
		{"agent token gw-*", "none", "agent", "Report as db-1", report("db-1", "eu-west"), codes.PermissionDenied, false},
		{"agent token for eu-west", "none", "west", "Report in us-east", report("gw-1", "us-east"), codes.PermissionDenied, false},
		{"agent certificate gw-2 with a reader token", "agent gw-2", "reader", "Report as gw-1", report("gw-1", "eu-west"), codes.PermissionDenied, false},
		// What each may do.
		{"agent token gw-*", "none", "agent", "Report as gw-1", report("gw-1", "eu-west"), codes.OK, true},
		{"agent token", "none", "agent", "ListRules", listRules, codes.OK, false},
		{"agent token for eu-west", "none", "west", "Report in eu-west", report("gw-4", "eu-west"), codes.OK, true},
		{"agent certificate gw-3", "agent gw-3", "", "Report as gw-3", report("gw-3", "eu-west"), codes.OK, true},
		{"legacy certificate gw-7", "legacy gw-7", "", "Report as gw-7", report("gw-7", "eu-west"), codes.OK, true},
		{"reader token", "none", "reader", "QueryUsage", queryUsage, codes.OK, false},
		{"reader certificate", "reader cert", "", "Status", clusterStatus, codes.OK, false},
		{"admin token", "none", "admin", "Backup", backup, codes.OK, false},
	} {
		t.Run(tc.caller+"/"+tc.method, func(t *testing.T) {
			before := ledgerText(l)
			cctx := ctx
			if tc.token != "" {
				tok, ok := s.tokens[tc.token]
				if !ok {
					tok = tc.token
				}
				cctx = withToken(ctx, tok)
			}
			err := tc.call(cctx, conns[tc.conn])
			if got := status.Code(err); got != tc.want {
				t.Fatalf("got %v (%v), want %v", got, err, tc.want)
			}
			if msg := status.Convert(err).Message(); tc.want == codes.Unauthenticated || tc.want == codes.PermissionDenied {
				for _, secret := range s.tokens {
					if strings.Contains(msg, secret) {
						t.Fatalf("the refusal %q shows a token", msg)
					}
				}
			}
			after := ledgerText(l)
			if tc.writes != (after != before) {
				t.Fatalf("ledger changed %v, want %v:\nbefore:\n%s\nafter:\n%s", after != before, tc.writes, before, after)
			}
		})
	}
	for _, want := range []struct{ method, reason string }{
		{"Report", authz.ReasonNoCredential}, {"Report", authz.ReasonBadToken}, {"PutRules", authz.ReasonWrongRole},
		{"Report", authz.ReasonWrongNode}, {"QueryUsage", authz.ReasonWrongRole},
	} {
		if n := testutil.ToFloat64(l.metrics.authRefusals.WithLabelValues(want.method, want.reason)); n == 0 {
			t.Errorf("no refusal of %s counted as %s", want.method, want.reason)
		}
	}
}

// TestSecurityHTTP: the HTTP endpoints are served over TLS; the ledger
// and status need the reader role, health checks and metrics do not.
func TestSecurityHTTP(t *testing.T) {
	s := newSecured(t, 1, nil)
	l := s.nodes[0]
	r, err := auth.NewReloader(auth.TLSFiles{CAFile: s.ca.File}, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: r.ClientConfig()}, Timeout: 10 * time.Second}
	get := func(path, token string) int {
		req, _ := http.NewRequest(http.MethodGet, "https://"+l.HTTPAddr()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "bearer "+token) // the scheme is case-insensitive (RFC 6750)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/v1/usage", "", http.StatusUnauthorized},
		{"/v1/usage", "wrong-token-wrong-token", http.StatusUnauthorized},
		{"/v1/usage", s.tokens["agent"], http.StatusForbidden},
		{"/v1/usage", s.tokens["reader"], http.StatusOK},
		{"/v1/status", "", http.StatusUnauthorized},
		{"/v1/status", s.tokens["admin"], http.StatusOK},
		{"/metrics", "", http.StatusOK},
		{"/healthz", "", http.StatusOK},
	} {
		if got := get(tc.path, tc.token); got != tc.want {
			t.Errorf("GET %s with token %.6q…: %d, want %d", tc.path, tc.token, got, tc.want)
		}
	}
	resp, err := http.Get("http://" + l.HTTPAddr() + "/healthz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP served on a TLS listener")
		}
	}
}

// TestRaftTakesMembersOnly: the Raft transport of a mutual-TLS cluster
// completes a handshake only with a member's certificate, not with an
// agent's or an admin's the same CA signed; and members joined over it.
func TestRaftTakesMembersOnly(t *testing.T) {
	s := newSecured(t, 2, nil)
	l := waitLeader(t, s.nodes)
	for _, tc := range []struct {
		leaf auth.Leaf
		ok   bool
	}{
		{auth.Leaf{File: "raft-agent", Role: auth.Agent, Name: "gw-1"}, false},
		{auth.Leaf{File: "raft-admin", Role: auth.Admin, Name: "ops"}, false},
		{auth.Leaf{File: "raft-member", Role: auth.Member, Name: "n9"}, true},
	} {
		cert := s.issue(t, tc.leaf)
		r, err := auth.NewReloader(auth.TLSFiles{CAFile: s.ca.File, CertFile: cert.CertFile, KeyFile: cert.KeyFile}, nil)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", l.RaftAddr(), r.ClientConfig())
		if err == nil {
			// Under TLS 1.3 the server's verdict on the client's
			// certificate arrives with the first read.
			_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				err = nil // still connected: accepted
			}
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s certificate on the Raft port: err %v, want accepted %v", tc.leaf.File, err, tc.ok)
		}
	}
}

// TestTokenRotation: a token is replaced while a client stays connected.
// Both are accepted while the file lists both; once the old entry is
// removed, the old token is refused and the new one works, with no
// restart of either side.
func TestTokenRotation(t *testing.T) {
	s := newSecured(t, 1, nil)
	addr := s.nodes[0].GRPCAddr()
	clientFile := filepath.Join(s.dir, "client.token")
	oldTok, newTok := s.tokens["reader"], auth.NewToken()
	if err := os.WriteFile(clientFile, []byte(oldTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := auth.NewTokenCredentials(clientFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := auth.NewReloader(auth.TLSFiles{CAFile: s.ca.File}, nil)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(r.ClientCredentials()), grpc.WithPerRPCCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	callStatus := func(ctx context.Context) error {
		_, err := allotpb.NewClusterServiceClient(cc).Status(ctx, &allotpb.StatusRequest{})
		return err
	}
	ctx := context.Background()
	if err := callStatus(ctx); err != nil {
		t.Fatalf("with the first token: %v", err)
	}
	entry := func(name, tok string) string {
		return fmt.Sprintf("  - {name: %s, role: reader, token: %q}\n", name, tok)
	}
	s.writeTokens(t, "tokens:\n"+entry("reader-old", oldTok)+entry("reader-new", newTok))
	replaceFile(t, clientFile, []byte(newTok+"\n"))
	testwait.For(t, 10*time.Second, "the client to send the new token and be served", func() bool {
		return creds.Token() == newTok && callStatus(ctx) == nil
	})
	s.writeTokens(t, "tokens:\n"+entry("reader-new", newTok))
	plain := tlsConn(t, addr, s.ca.File, nil)
	testwait.For(t, 10*time.Second, "the old token to be refused", func() bool {
		_, err := allotpb.NewClusterServiceClient(plain).Status(withToken(ctx, oldTok), &allotpb.StatusRequest{})
		return status.Code(err) == codes.Unauthenticated
	})
	if err := callStatus(ctx); err != nil {
		t.Fatalf("the connected client with the new token: %v", err)
	}
	// A tokens file broken mid-edit keeps the last good table.
	s.writeTokens(t, "tokens: [{name: x, role: nobody}]\n")
	time.Sleep(auth.CheckEvery + 100*time.Millisecond) // the file must be looked at again; nothing to wait on
	if err := callStatus(ctx); err != nil {
		t.Fatalf("after a broken tokens file: %v", err)
	}
}

// TestCertificateRotation: the server's certificate and the CA bundle
// are re-read when they change. New connections see the new server
// certificate; after the CA bundle drops the old CA, a connected client
// whose certificate the old CA signed is refused once its connection is
// recycled (MaxConnectionAge), and one from the new CA is served.
func TestCertificateRotation(t *testing.T) {
	s := newSecured(t, 1, func(c *Config) { c.MaxConnectionAge = time.Second })
	l := s.nodes[0]
	serial := func() string {
		r, _ := auth.NewReloader(auth.TLSFiles{CAFile: s.ca.File}, nil)
		cfg := r.ClientConfig()
		cfg.NextProtos = []string{"h2"}
		conn, err := tls.Dial("tcp", l.GRPCAddr(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := serial()
	s.issue(t, auth.Leaf{File: l.ID(), Role: auth.Member, Name: l.ID()}) // over the member's files
	testwait.For(t, 10*time.Second, "the new server certificate to be served", func() bool { return serial() != first })

	// Rotate the CA that signs clients: bundle old and new, then new only.
	oldAgent := s.issue(t, auth.Leaf{File: "old-agent", Role: auth.Agent, Name: "gw-1"})
	newCA, err := auth.NewCA(t.TempDir(), "new-ca", "allot.test")
	if err != nil {
		t.Fatal(err)
	}
	newAgent, err := newCA.Issue(auth.Leaf{File: "new-agent", Role: auth.Agent, Name: "gw-2", DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	oldPEM, _ := os.ReadFile(s.ca.File)
	newPEM, _ := os.ReadFile(newCA.File)
	clientCA := filepath.Join(s.dir, "client-ca.pem") // clients keep trusting the server's CA
	if err := os.WriteFile(clientCA, oldPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	oldConn := tlsConn(t, l.GRPCAddr(), clientCA, &oldAgent)
	newConn := tlsConn(t, l.GRPCAddr(), clientCA, &newAgent)
	ctx := context.Background()
	seq := uint64(0)
	reportOn := func(cc *grpc.ClientConn, node string) error {
		seq++
		_, err := allotpb.NewAgentServiceClient(cc).Report(ctx, usageReport(node, "eu-west", seq))
		return err
	}
	serverCA := func(pem []byte) { replaceFile(t, s.ca.File, pem) }
	if err := reportOn(oldConn, "gw-1"); err != nil {
		t.Fatalf("the old CA's agent before rotation: %v", err)
	}
	serverCA(append(append([]byte{}, oldPEM...), newPEM...))
	testwait.For(t, 10*time.Second, "the new CA's agent to be served", func() bool { return reportOn(newConn, "gw-2") == nil })
	if err := reportOn(oldConn, "gw-1"); err != nil {
		t.Fatalf("the old CA's agent while both are trusted: %v", err)
	}
	serverCA(newPEM)
	testwait.For(t, 15*time.Second, "the old CA's agent to be refused", func() bool { return reportOn(oldConn, "gw-1") != nil })
	if err := reportOn(newConn, "gw-2"); err != nil {
		t.Fatalf("the new CA's agent after rotation: %v", err)
	}
}

// TestNewNodesBounded: node IDs never heard from before join at most
// MaxNewNodesPerMinute a minute; the rest are refused, counted, and not
// counted as nodes, while known nodes go on reporting.
func TestNewNodesBounded(t *testing.T) {
	c := cluster(t, 1, func(c *Config) { c.MaxNewNodesPerMinute = 3 })[0]
	putRules(t, c, quotaRule)
	client := allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var nodes uint32
	for i := 1; i <= 3; i++ {
		resp, err := client.Report(ctx, usageReport(fmt.Sprintf("gw-%d", i), "eu-west", 1))
		if err != nil {
			t.Fatalf("new node %d of 3: %v", i, err)
		}
		nodes = resp.GetNodes()
	}
	before := ledgerText(c)
	for i := 4; i <= 50; i++ {
		_, err := client.Report(ctx, usageReport(fmt.Sprintf("invented-%d", i), "eu-west", 1))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("invented node %d: %v, want ResourceExhausted", i, err)
		}
	}
	if after := ledgerText(c); after != before {
		t.Errorf("refused nodes wrote to the ledger:\n%s", after)
	}
	resp, err := client.Report(ctx, usageReport("gw-1", "eu-west", 2))
	if err != nil {
		t.Fatalf("a known node after the flood: %v", err)
	}
	if resp.GetNodes() > nodes {
		t.Errorf("the fleet grew to %d nodes from %d", resp.GetNodes(), nodes)
	}
	if n := testutil.ToFloat64(c.metrics.newNodes.WithLabelValues("refused")); n != 47 {
		t.Errorf("%v refusals counted, want 47", n)
	}
}

// TestReportNumbersChecked: numbers beyond the coordinator's bounds are
// refused naming the field, and nothing is written.
func TestReportNumbersChecked(t *testing.T) {
	c := cluster(t, 1, func(c *Config) { c.MaxUnitsPerSecond = 1000 })[0]
	putRules(t, c, quotaRule)
	client := allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		field string
		mod   func(*allotpb.ReportRequest)
	}{
		{"sent_unix_nano", func(r *allotpb.ReportRequest) { r.SentUnixNano = time.Now().Add(-2 * time.Hour).UnixNano() }},
		{"usage.cut_unix_nano", func(r *allotpb.ReportRequest) { r.Usage.CutUnixNano = time.Now().Add(3 * time.Hour).UnixNano() }},
		{"usage.counts[0].window_unix", func(r *allotpb.ReportRequest) { r.Usage.Counts[0].WindowUnix = time.Now().Add(5 * time.Hour).Unix() }},
		{"usage.counts[0].admitted", func(r *allotpb.ReportRequest) { r.Usage.Counts[0].Admitted = 1000*3600 + 1 }},
		{"demand[0].admitted", func(r *allotpb.ReportRequest) {
			r.Demand = []*allotpb.KeyDemand{{Rule: "plan-quota", Key: "acme", Tenant: "acme", Admitted: 5000}}
		}},
		{"demand[0].priority", func(r *allotpb.ReportRequest) {
			r.Demand = []*allotpb.KeyDemand{{Rule: "plan-quota", Key: "acme", Tenant: "acme", Priority: 300}}
		}},
		{"region", func(r *allotpb.ReportRequest) { r.Region = strings.Repeat("r", 300) }},
	} {
		req := usageReport("gw-1", "eu-west", 1)
		tc.mod(req)
		before := ledgerText(c)
		_, err := client.Report(ctx, req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("%s: %v; want InvalidArgument naming it", tc.field, err)
		}
		if ledgerText(c) != before {
			t.Errorf("%s: the refused report wrote to the ledger", tc.field)
		}
	}
}
