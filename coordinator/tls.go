package coordinator

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/hashicorp/raft"
)

// tlsConfigs builds the server and client TLS configurations from the PEM
// files. With a CA, both sides require certificates signed by it.
func (t TLSConfig) configs() (server, client *tls.Config, err error) {
	if !t.Enabled() {
		return nil, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: loading TLS certificate: %w", err)
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("coordinator: reading TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("coordinator: TLS CA file %s holds no certificates", t.CAFile)
		}
		server.ClientCAs, server.ClientAuth = pool, tls.RequireAndVerifyClientCert
		client.RootCAs = pool
	}
	return server, client, nil
}

// tlsStreamLayer carries Raft's traffic over TLS.
type tlsStreamLayer struct {
	net.Listener
	advertise net.Addr
	client    *tls.Config
}

func newTLSStreamLayer(bind, advertise string, server, client *tls.Config) (*tlsStreamLayer, error) {
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("coordinator: raft listener: %w", err)
	}
	adv := l.Addr()
	if advertise != bind {
		if adv, err = net.ResolveTCPAddr("tcp", advertise); err != nil {
			l.Close()
			return nil, fmt.Errorf("coordinator: raft advertise address %s: %w", advertise, err)
		}
	}
	return &tlsStreamLayer{Listener: tls.NewListener(l, server), advertise: adv, client: client}, nil
}

// Addr implements net.Listener with the address other members dial.
func (s *tlsStreamLayer) Addr() net.Addr { return s.advertise }

// Dial implements raft.StreamLayer.
func (s *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.client}
	return d.Dial("tcp", string(address))
}

// identities returns the names a verified peer certificate asserts: its
// common name and DNS names.
func identities(state tls.ConnectionState) []string {
	if len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return nil
	}
	leaf := state.VerifiedChains[0][0]
	return append([]string{leaf.Subject.CommonName}, leaf.DNSNames...)
}

var errIdentity = errors.New("coordinator: certificate does not name this node")
