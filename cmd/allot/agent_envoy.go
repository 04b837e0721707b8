package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"runtime"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/envoy"
)

// envoyFlags configures the sidecar's Envoy rate limit service.
type envoyFlags struct {
	addr    string
	headers bool
}

func (ef *envoyFlags) register(f *flags) {
	f.StringVar(&ef.addr, "envoy-rls-addr", "", "serve Envoy's rate limit service (envoy.service.ratelimit.v3) and ext_authz (envoy.service.auth.v3, read as --authz-* say) over gRPC on this address, e.g. 127.0.0.1:8081; empty: off")
	f.BoolVar(&ef.headers, "envoy-rls-headers", false, "add RateLimit-Limit/-Remaining/-Reset (and Retry-After on refusals) to the responses Envoy sends")
}

// serveEnvoy starts the rate limit service on its own gRPC listener, over
// TLS when tlsConfig is set, and returns a function that stops it.
func (ef *envoyFlags) serve(a *agent.Agent, authz agent.ForwardAuthConfig, tlsConfig *tls.Config, log hclog.Logger) (stop func(), err error) {
	if ef.addr == "" {
		return func() {}, nil
	}
	lis, err := net.Listen("tcp", ef.addr)
	if err != nil {
		return nil, fmt.Errorf("listening on --envoy-rls-addr %s: %w", ef.addr, err)
	}
	// Workers reuse goroutines across calls: one short call per request
	// otherwise starts a goroutine each.
	opts := []grpc.ServerOption{grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0)))}
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	g := grpc.NewServer(opts...)
	envoy.NewRateLimitServer(a, envoy.Options{Headers: ef.headers}).Register(g)
	envoy.NewAuthorizationServer(a, authz).Register(g)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	go func() {
		if err := g.Serve(lis); err != nil {
			log.Error("envoy rate limit service stopped", "error", err)
		}
	}()
	log.Info("serving Envoy's rate limit service", "addr", lis.Addr().String())
	return func() { hs.Shutdown(); g.GracefulStop() }, nil
}
