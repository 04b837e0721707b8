package coordinator

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/allot-io/allot/internal/auth"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// reloader reads the TLS files, kept current as they change, or nil
// without TLS.
func (t TLSConfig) reloader(log hclog.Logger) (*auth.Reloader, error) {
	if !t.Enabled() {
		return nil, nil
	}
	r, err := auth.NewReloader(auth.TLSFiles{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile}, func(err error) {
		log.Error("a changed TLS file could not be loaded", "error", err)
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	return r, nil
}

// tlsStreamLayer carries Raft's traffic over TLS.
type tlsStreamLayer struct {
	net.Listener
	advertise net.Addr
	client    func() *tls.Config
}

func newTLSStreamLayer(bind, advertise string, server *tls.Config, client func() *tls.Config) (*tlsStreamLayer, error) {
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
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.client()}
	return d.Dial("tcp", string(address))
}
