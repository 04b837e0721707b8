package raftnet

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// TLSStreamLayer carries Raft's traffic over TLS: a raft.StreamLayer
// whose listener serves with server and whose dials present client's
// configuration, taken afresh for each connection (the files it reads
// may have changed).
type TLSStreamLayer struct {
	net.Listener
	advertise net.Addr
	client    func() *tls.Config
}

// NewTLSStreamLayer listens on bind and advertises advertise, the address
// other members dial.
func NewTLSStreamLayer(bind, advertise string, server *tls.Config, client func() *tls.Config) (*TLSStreamLayer, error) {
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
	return &TLSStreamLayer{Listener: tls.NewListener(l, server), advertise: adv, client: client}, nil
}

// Addr implements net.Listener with the address other members dial.
func (s *TLSStreamLayer) Addr() net.Addr { return s.advertise }

// Dial implements raft.StreamLayer.
func (s *TLSStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.client()}
	return d.Dial("tcp", string(address))
}
