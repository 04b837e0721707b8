package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"
)

// TLSFiles names the PEM files of a TLS identity: a certificate and key,
// and a CA bundle that peers are verified against.
type TLSFiles struct {
	CertFile string
	KeyFile  string
	CAFile   string
}

// parseKeyPair reads a certificate and its key, with the leaf parsed.
func parseKeyPair(d [][]byte) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(d[0], d[1])
	if err != nil {
		return nil, err
	}
	return &cert, nil
}

func parsePool(name string) func(d [][]byte) (*x509.CertPool, error) {
	return func(d [][]byte) (*x509.CertPool, error) {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(d[0]) {
			return nil, fmt.Errorf("CA file %s holds no certificates", name)
		}
		return pool, nil
	}
}

// Reloader serves a TLS identity from files, re-read when they change.
type Reloader struct {
	pair *watched[*tls.Certificate]
	ca   *watched[*x509.CertPool]
}

// NewReloader reads the files; CertFile and KeyFile go together, and
// either may be empty with CAFile alone (a client that only verifies).
func NewReloader(f TLSFiles, onError func(error)) (*Reloader, error) {
	r := &Reloader{}
	var err error
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("auth: a TLS certificate and its key go together")
	}
	if f.CertFile != "" {
		if r.pair, err = watch([]string{f.CertFile, f.KeyFile}, parseKeyPair, onError); err != nil {
			return nil, fmt.Errorf("auth: loading TLS certificate: %w", err)
		}
	}
	if f.CAFile != "" {
		if r.ca, err = watch([]string{f.CAFile}, parsePool(f.CAFile), onError); err != nil {
			return nil, fmt.Errorf("auth: reading TLS CA: %w", err)
		}
	}
	return r, nil
}

// HasCA reports whether peers are verified against a CA file.
func (r *Reloader) HasCA() bool { return r.ca != nil }

func (r *Reloader) certificate() (*tls.Certificate, error) {
	if r.pair == nil {
		return nil, errors.New("auth: no TLS certificate configured")
	}
	return r.pair.get(), nil
}

// ServerConfig serves the current certificate. With a CA, client
// certificates are verified against the current bundle: required when
// require is set, verified when given otherwise (callers without one then
// authenticate by token).
func (r *Reloader) ServerConfig(require bool) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.certificate() }
	if r.ca == nil {
		return base
	}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = r.ca.get()
		c.ClientAuth = tls.VerifyClientCertIfGiven
		if require {
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
		return c, nil
	}
	return base
}

// ClientConfig presents the current certificate, if any, and verifies
// servers against the CA bundle as it is now (the system's roots without
// one). It is a snapshot of the bundle: build one per connection, or use
// ClientCredentials, which does.
func (r *Reloader) ClientConfig() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if r.pair != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return r.certificate() }
	}
	if r.ca != nil {
		c.RootCAs = r.ca.get()
	}
	return c
}

// ClientCredentials are gRPC transport credentials that take the current
// certificate and CA bundle at every handshake.
func (r *Reloader) ClientCredentials() credentials.TransportCredentials {
	return &reloadingCreds{r: r}
}

type reloadingCreds struct {
	r          *Reloader
	serverName string
}

func (c *reloadingCreds) current() credentials.TransportCredentials {
	cfg := c.r.ClientConfig()
	cfg.ServerName = c.serverName
	return credentials.NewTLS(cfg)
}

func (c *reloadingCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.current().ClientHandshake(ctx, authority, conn)
}

func (c *reloadingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("auth: client credentials cannot serve")
}

func (c *reloadingCreds) Info() credentials.ProtocolInfo { return c.current().Info() }

func (c *reloadingCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

// OverrideServerName implements credentials.TransportCredentials.
//
// Deprecated: as gRPC's own, kept for the interface.
func (c *reloadingCreds) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}

// CertGrants returns what a verified client certificate grants, checking
// it is still valid at now (a connection outlives the handshake). The
// role comes from a URI SAN whose path ends in /allot/<role>/<name>; a
// certificate without one is an agent for its common name and DNS names.
func CertGrants(leaf *x509.Certificate, now time.Time) ([]Grant, error) {
	if now.After(leaf.NotAfter) {
		return nil, errExpired
	}
	var out []Grant
	for _, u := range leaf.URIs {
		if g, ok := uriGrant(u); ok {
			out = append(out, g)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	names := append([]string{leaf.Subject.CommonName}, leaf.DNSNames...)
	return []Grant{{Role: Agent, Name: "cert:" + leaf.Subject.CommonName, NodeNames: names}}, nil
}

var errExpired = errors.New("certificate expired")

// uriGrant reads a role URI: any scheme and host (a SPIFFE trust domain),
// a path ending in /allot/<role>/<name>.
func uriGrant(u *url.URL) (Grant, bool) {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) < 3 || parts[len(parts)-3] != "allot" {
		return Grant{}, false
	}
	role, err := ParseRole(parts[len(parts)-2])
	name := parts[len(parts)-1]
	if err != nil || name == "" {
		return Grant{}, false
	}
	g := Grant{Role: role, Name: u.String()}
	switch role {
	case Agent:
		g.NodeNames = []string{name}
	case Balance:
		// The name of a balance certificate is its tenant: a path
		// segment, escaped in the URI as any tenant name must be.
		g.Tenant = name
	}
	return g, true
}

// RoleURI is the URI SAN naming role and name under a trust domain:
// spiffe://<domain>/allot/<role>/<name>.
func RoleURI(domain string, role Role, name string) *url.URL {
	r := role.String()
	if role == Member {
		r = "coordinator"
	}
	return &url.URL{Scheme: "spiffe", Host: domain, Path: "/allot/" + r + "/" + name}
}

// RequirePeerRole makes a configuration accept only peers whose verified
// certificate grants role: the Raft transport takes and dials members
// only, whatever else the CA signs.
func RequirePeerRole(c *tls.Config, role Role, now func() time.Time) {
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.VerifiedChains) == 0 {
			return errors.New("auth: a verified peer certificate is required")
		}
		grants, err := CertGrants(cs.VerifiedChains[0][0], now())
		if err != nil {
			return err
		}
		for _, g := range grants {
			if g.Role == role {
				return nil
			}
		}
		return fmt.Errorf("auth: certificate %q is not a %v", cs.VerifiedChains[0][0].Subject.CommonName, role)
	}
}
