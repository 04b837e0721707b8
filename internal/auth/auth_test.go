package auth

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
)

func TestParseTokensErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"", "empty"},
		{"tokens: {}", "want a tokens: list"},
		{"tokenz: []", `:1: unknown field "tokenz"`},
		{"tokens:\n  - {role: admin, token: aaaaaaaaaaaaaaaaaaaa}", ":2: name is required"},
		{"tokens:\n  - {name: a, role: root, token: aaaaaaaaaaaaaaaaaaaa}", "role must be agent, reader, balance or admin"},
		{"tokens:\n  - {name: a, role: member, token: aaaaaaaaaaaaaaaaaaaa}", "role must be agent, reader, balance or admin"},
		{"tokens:\n  - {name: a, role: agent, token: aaaaaaaaaaaaaaaaaaaa}", "needs nodes"},
		{"tokens:\n  - {name: a, role: reader, nodes: gw-*, token: aaaaaaaaaaaaaaaaaaaa}", "bind agent tokens only"},
		{"tokens:\n  - {name: a, role: agent, nodes: \"gw-[\", token: aaaaaaaaaaaaaaaaaaaa}", "not a valid pattern"},
		{"tokens:\n  - {name: a, role: balance, token: aaaaaaaaaaaaaaaaaaaa}", "a balance token needs tenant"},
		{"tokens:\n  - {name: a, role: reader, tenant: acme, token: aaaaaaaaaaaaaaaaaaaa}", "tenant binds balance tokens only"},
		{"tokens:\n  - {name: a, role: admin, token: short}", "at least 16 bytes"},
		{"tokens:\n  - {name: a, role: admin}", "exactly one of token and sha256"},
		{"tokens:\n  - {name: a, role: admin, sha256: abc}", "64 hex digits"},
		{"tokens:\n  - {name: a, role: admin, token: aaaaaaaaaaaaaaaaaaaa, colour: red}", `unknown field "colour"`},
		{"tokens:\n  - {name: a, role: admin, token: aaaaaaaaaaaaaaaaaaaa}\n  - {name: a, role: admin, token: bbbbbbbbbbbbbbbbbbbb}", `:3: name "a" is already used on line 2`},
		{"tokens:\n  - {name: [a], role: admin}", "name: want a string"},
		// allot token's output appended with >>: the second list would
		// silently replace the first, admin token and all.
		{"tokens:\n  - {name: ops, role: admin, token: aaaaaaaaaaaaaaaaaaaa}\ntokens:\n  - {name: b, role: reader, token: bbbbbbbbbbbbbbbbbbbb}",
			"tokens.yaml:3: tokens is given twice (first on line 1): a tokens file holds one tokens: list; put every entry under it (allot token --append tokens.yaml adds one)"},
		{"tokens:\n  - name: a\n    role: admin\n    role: reader\n    token: aaaaaaaaaaaaaaaaaaaa", "tokens.yaml:4: tokens[0].role is given twice (first on line 3)"},
		{"tokens:\n  - {name: a, role: reader, token: aaaaaaaaaaaaaaaaaaaa, token: bbbbbbbbbbbbbbbbbbbb}", "tokens.yaml:2: tokens[0].token is given twice (first on line 2)"},
		{"tokens:\n  - {name: a, role: admin, token: aaaaaaaaaaaaaaaaaaaa}\n---\ntokens:\n  - {name: b, role: admin, token: bbbbbbbbbbbbbbbbbbbb}", "tokens.yaml:3: holds more than one YAML document"},
	} {
		_, err := ParseTokens("tokens.yaml", []byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "tokens.yaml") {
			t.Errorf("%q: %v; want an error naming the file and %q", tc.body, err, tc.want)
		}
	}
}

func TestTokensLookup(t *testing.T) {
	admin, gw := NewToken(), NewToken()
	body := "tokens:\n  - {name: ops, role: admin, token: " + admin + "}\n  - {name: gws, role: agent, nodes: 'gw-*', regions: eu-*, sha256: " + TokenSHA256(gw) + "}\n"
	tokens, err := ParseTokens("t", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := tokens.Lookup(admin); !ok || g.Name != "ops" || !g.Permits(Reader) || !g.MayReportAs("anything", "anywhere") {
		t.Errorf("admin token: %+v %v", g, ok)
	}
	g, ok := tokens.Lookup(gw)
	if !ok || g.Name != "gws" {
		t.Fatalf("agent token by its hash: %+v %v", g, ok)
	}
	for _, tc := range []struct {
		node, region string
		ok           bool
	}{{"gw-1", "eu-west", true}, {"db-1", "eu-west", false}, {"gw-1", "us-east", false}, {"gw-1", "", false}} {
		if got := g.MayReportAs(tc.node, tc.region); got != tc.ok {
			t.Errorf("agent token as %s in %q: %v, want %v", tc.node, tc.region, got, tc.ok)
		}
	}
	if g.Permits(Reader) || !g.Permits(Agent|Reader) {
		t.Error("an agent token's roles")
	}
	for _, bad := range []string{"", admin[:len(admin)-1], admin + "x", TokenSHA256(gw)} {
		if _, ok := tokens.Lookup(bad); ok {
			t.Errorf("token %q accepted", bad)
		}
	}
}

func TestCertGrants(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA(dir, "ca", "example.org")
	if err != nil {
		t.Fatal(err)
	}
	parse := func(l Leaf) []Grant {
		out, err := ca.Issue(l)
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewReloader(TLSFiles{CertFile: out.CertFile, KeyFile: out.KeyFile}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := r.certificate()
		gs, err := CertGrants(c.Leaf, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return gs
	}
	if gs := parse(Leaf{File: "a", Role: Agent, Name: "gw-17", CommonName: "whatever"}); len(gs) != 1 || !gs[0].MayReportAs("gw-17", "x") || gs[0].MayReportAs("whatever", "x") {
		t.Errorf("agent URI: %+v", gs)
	}
	if gs := parse(Leaf{File: "m", Role: Member, Name: "c1"}); len(gs) != 1 || gs[0].Role != Member || gs[0].Name != "spiffe://example.org/allot/coordinator/c1" {
		t.Errorf("member URI: %+v", gs)
	}
	if gs := parse(Leaf{File: "legacy", CommonName: "gw-7", DNSNames: []string{"gw-7.internal"}}); len(gs) != 1 || gs[0].Role != Agent ||
		!gs[0].MayReportAs("gw-7", "") || !gs[0].MayReportAs("gw-7.internal", "") || gs[0].MayReportAs("gw-8", "") {
		t.Errorf("legacy certificate: %+v", gs)
	}
	for _, id := range []string{"spiffe://example.org/ns/prod/sa/gateway", "spiffe://example.org/ns/prod/admin/gateway", "spiffe://example.org/admin/x"} {
		u, _ := url.Parse(id)
		if g, ok := uriGrant(u); ok {
			t.Errorf("%s read as %+v", id, g)
		}
	}
	out, _ := ca.Issue(Leaf{File: "old", Role: Agent, Name: "gw-1", NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	r, _ := NewReloader(TLSFiles{CertFile: out.CertFile, KeyFile: out.KeyFile}, nil)
	c, _ := r.certificate()
	if _, err := CertGrants(c.Leaf, time.Now()); err == nil {
		t.Error("an expired certificate granted something")
	}
}

// TestWatchedKeepsLastGood: a change is picked up; a change that does not
// parse is reported once and the previous value stays.
func TestWatchedKeepsLastGood(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first-token\n")
	var errs []error
	w, err := watch([]string{path}, parseTokenFile(path), func(err error) { errs = append(errs, err) })
	if err != nil {
		t.Fatal(err)
	}
	c := &TokenCredentials{token: w.get}
	now := time.Now()
	w.now = func() time.Time { return now }
	step := func(s string) string {
		write(s)
		now = now.Add(CheckEvery)
		return c.Token()
	}
	if got := step("second-token\n"); got != "second-token" {
		t.Errorf("after a change: %q", got)
	}
	if got := step("two tokens\n"); got != "second-token" || len(errs) != 1 {
		t.Errorf("after a bad change: %q, %d errors", got, len(errs))
	}
	if got := step("two tokens\n"); got != "second-token" || len(errs) != 1 {
		t.Errorf("the same bad file again: %q, %d errors", got, len(errs))
	}
	write("third-token")
	if got := c.Token(); got != "second-token" {
		t.Errorf("read again within CheckEvery: %q", got)
	}
	now = now.Add(CheckEvery)
	if got := c.Token(); got != "third-token" {
		t.Errorf("a good file after a bad one: %q", got)
	}
	if _, err := NewTokenCredentials(filepath.Join(t.TempDir(), "missing"), nil); err == nil {
		t.Error("a missing token file accepted")
	}
}

// TestTokenNeverInTheClear: the token goes over TLS, or to loopback; a
// plaintext call to another host gets an error instead.
func TestTokenNeverInTheClear(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("a-token-of-some-length"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewTokenCredentials(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := credentials.RequestInfo{AuthInfo: insecureInfo{}}
	tlsInfo := credentials.RequestInfo{AuthInfo: credentials.TLSInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}}
	for _, tc := range []struct {
		info credentials.RequestInfo
		uri  string
		ok   bool
	}{
		{plain, "https://127.0.0.1:7400/allot.v1.AgentService", true},
		{plain, "https://localhost:7400/allot.v1.AgentService", true},
		{plain, "https://[::1]:7400/allot.v1.AgentService", true},
		{plain, "https://10.0.0.1:7400/allot.v1.AgentService", false},
		{plain, "https://coordinators.internal:7400/allot.v1.AgentService", false},
		{tlsInfo, "https://coordinators.internal:7400/allot.v1.AgentService", true},
	} {
		ctx := credentials.NewContextWithRequestInfo(context.Background(), tc.info)
		md, err := c.GetRequestMetadata(ctx, tc.uri)
		if (err == nil) != tc.ok || (tc.ok && md["authorization"] != "Bearer a-token-of-some-length") {
			t.Errorf("%s: %v %v, want ok %v", tc.uri, md, err, tc.ok)
		}
	}
	if !IsLoopback("127.0.0.2") || IsLoopback("0.0.0.0") || IsLoopback(net.IPv4zero.String()) {
		t.Error("IsLoopback")
	}
}

type insecureInfo struct{}

func (insecureInfo) AuthType() string { return "insecure" }
func (insecureInfo) GetCommonAuthInfo() credentials.CommonAuthInfo {
	return credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}
}

// FuzzParseTokens: any file parses or is refused with an error naming
// it; what parses looks up only its own tokens.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte("tokens:\n  - {name: a, role: agent, nodes: 'gw-*', token: aaaaaaaaaaaaaaaaaaaa}\n"))
	f.Add([]byte("tokens:\n  - name: r\n    role: reader\n    sha256: " + TokenSHA256("x") + "\n"))
	f.Add([]byte("tokens: [{name: a, role: admin, token: &x bbbbbbbbbbbbbbbbbbbb}, {name: b, role: admin, token: *x}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tokens, err := ParseTokens("fuzz.yaml", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("error without the file's name: %v", err)
			}
			return
		}
		for _, e := range tokens.entries {
			if e.grant.Name == "" || (e.grant.Role == Agent && e.grant.NodeGlob == "") || e.grant.Role == Member {
				t.Fatalf("accepted a bad entry: %+v", e.grant)
			}
		}
		if _, ok := tokens.Lookup(""); ok {
			t.Fatal("the empty token accepted")
		}
	})
}

// TestBalanceGrant: a balance grant reads its own tenant's balance and
// permits nothing a reader may call; a reader's reads every tenant's.
func TestBalanceGrant(t *testing.T) {
	dash, rd := NewToken(), NewToken()
	body := "tokens:\n  - {name: dash, role: balance, tenant: acme, token: " + dash + "}\n  - {name: rd, role: reader, token: " + rd + "}\n"
	tokens, err := ParseTokens("t", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	g, ok := tokens.Lookup(dash)
	if !ok || g.Tenant != "acme" || g.Role.String() != "balance" {
		t.Fatalf("balance token: %+v %v", g, ok)
	}
	if !g.MayReadBalance("acme") || g.MayReadBalance("initech") || g.MayReadBalance("") || g.Permits(Reader|Agent) || g.MayReportAs("gw-1", "eu-west") {
		t.Errorf("balance grant %+v may do more or less than read acme's balance", g)
	}
	if r, _ := tokens.Lookup(rd); !r.MayReadBalance("initech") {
		t.Errorf("reader grant %+v may not read a balance", r)
	}
	// A certificate naming the role binds the tenant its name gives.
	u := RoleURI("allot.test", Balance, "acme")
	if cg, ok := uriGrant(u); !ok || cg.Role != Balance || cg.Tenant != "acme" || !cg.MayReadBalance("acme") || cg.MayReadBalance("initech") {
		t.Errorf("%s: %+v %v", u, cg, ok)
	}
}
