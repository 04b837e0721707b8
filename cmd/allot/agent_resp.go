package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/resp"
)

// respFlags configures the sidecar's Redis-protocol server (agent/resp).
type respFlags struct {
	addr, socket   string
	maxConns       int
	throttleDomain string
}

func (rf *respFlags) register(f *flags) {
	f.StringVar(&rf.addr, "resp-addr", "", "serve the Redis protocol on this address, e.g. 127.0.0.1:6380: ALLOT.CHECK from any Redis client (docs/api.md#the-redis-protocol); plain TCP, so loopback unless --insecure; empty: off")
	f.StringVar(&rf.socket, "resp-socket", "", "also serve the Redis protocol on this Unix-domain socket (mode 0660): for gateways on the same host")
	f.IntVar(&rf.maxConns, "resp-max-conns", resp.DefaultMaxConns, "Redis-protocol connections served at once; one more is answered with an error and closed")
	f.StringVar(&rf.throttleDomain, "resp-throttle-domain", resp.ThrottleDomain, "the descriptor domain whose rule takes CL.THROTTLE's keys (a gcra descriptor rule matching the entry \"key\")")
}

// serve starts the RESP server on its listeners and returns a function
// that stops it.
func (rf *respFlags) serve(a *agent.Agent, log hclog.Logger) (stop func(), err error) {
	if rf.addr == "" && rf.socket == "" {
		return func() {}, nil
	}
	if rf.maxConns < 1 {
		return nil, usagef("agent", "--resp-max-conns %d: want at least 1", rf.maxConns)
	}
	s := resp.New(a, resp.Config{MaxConns: rf.maxConns, ThrottleDomain: rf.throttleDomain, Logger: log})
	var ls []net.Listener
	if rf.addr != "" {
		l, err := net.Listen("tcp", rf.addr)
		if err != nil {
			return nil, fmt.Errorf("listening on --resp-addr %s: %w", rf.addr, err)
		}
		ls = append(ls, l)
	}
	if rf.socket != "" {
		l, err := listenSocket("--resp-socket", rf.socket)
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, err
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		go func() {
			if err := s.Serve(l); err != nil && !errors.Is(err, resp.ErrServerClosed) {
				log.Error("the Redis-protocol server stopped", "addr", l.Addr().String(), "error", err)
			}
		}()
		log.Info("serving the Redis protocol", "addr", l.Addr().String())
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
		if rf.socket != "" {
			os.Remove(rf.socket)
		}
	}, nil
}
