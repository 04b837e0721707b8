package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"runtime"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/envoy"
	"github.com/allot-io/allot/agent/forwardauth"
	"github.com/allot-io/allot/agent/sidecar"
	"github.com/allot-io/allot/internal/tracing"
)

// grpcFlags configures the sidecar's gRPC services: its own
// SidecarService, Envoy's rate limit service and ext_authz, and health.
type grpcFlags struct {
	addr    string
	socket  string
	headers bool
}

func (gf *grpcFlags) register(f *flags) {
	f.StringVar(&gf.addr, "grpc-addr", "", "serve the sidecar's gRPC services on this address, e.g. 127.0.0.1:8081: allot.v1.SidecarService (Check, and CheckStream for gateways that pipeline), Envoy's rate limit service (envoy.service.ratelimit.v3) and ext_authz (envoy.service.auth.v3, read as --authz-* say); empty: off")
	f.StringVar(&gf.addr, "envoy-rls-addr", "", "the same as --grpc-addr (its earlier name)")
	f.StringVar(&gf.socket, "grpc-socket", "", "also serve the gRPC services, in plaintext, on this Unix-domain socket (mode 0660): for gateways on the same host")
	f.BoolVar(&gf.headers, "envoy-rls-headers", false, "add RateLimit-Limit/-Remaining/-Reset (and Retry-After on refusals) to the responses Envoy sends")
}

// serve starts the gRPC services on their own listeners, the TCP one over
// TLS when tlsConfig is set, and returns a function that stops them.
func (gf *grpcFlags) serve(a *agent.Agent, authz forwardauth.Config, tlsConfig *tls.Config, reg prometheus.Registerer, log hclog.Logger) (stop func(), err error) {
	if gf.addr == "" && gf.socket == "" {
		return func() {}, nil
	}
	// grpc_server_* for every call, by service, method and code; the
	// latency histogram from 25 µs, a check answered from memory.
	metrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets(prometheus.ExponentialBuckets(0.000025, 2, 14))))
	if err := reg.Register(metrics); err != nil {
		return nil, err
	}
	// Workers reuse goroutines across calls: one short call per request
	// otherwise starts a goroutine each.
	newServer := func(tlsConfig *tls.Config) (*grpc.Server, func()) {
		// A server span per call when the agent traces, its interceptors
		// first so that every call is in it.
		opts := append(tracing.ServerOptions(a.Tracer()), grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
			grpc.ChainUnaryInterceptor(metrics.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(metrics.StreamServerInterceptor()))
		if tlsConfig != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
		}
		g := grpc.NewServer(opts...)
		sidecar := sidecar.NewSidecarServer(a)
		sidecar.Register(g)
		envoy.NewRateLimitServer(a, envoy.Options{Headers: gf.headers}).Register(g)
		envoy.NewAuthorizationServer(a, authz).Register(g)
		hs := health.NewServer()
		healthpb.RegisterHealthServer(g, hs)
		metrics.InitializeMetrics(g)
		// Health says NOT_SERVING first, the streams end after their
		// batch in hand, then calls in flight finish.
		return g, func() { hs.Shutdown(); sidecar.Drain(); g.GracefulStop() }
	}
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	start := func(lis net.Listener, tlsConfig *tls.Config) {
		g, stop := newServer(tlsConfig)
		go func() {
			if err := g.Serve(lis); err != nil {
				log.Error("gRPC services stopped", "addr", lis.Addr().String(), "error", err)
			}
		}()
		stops = append(stops, stop)
		log.Info("serving the sidecar's gRPC services", "addr", lis.Addr().String())
	}
	if gf.addr != "" {
		lis, err := net.Listen("tcp", gf.addr)
		if err != nil {
			return nil, fmt.Errorf("listening on --grpc-addr %s: %w", gf.addr, err)
		}
		start(lis, tlsConfig)
	}
	if gf.socket != "" {
		lis, err := listenSocket("--grpc-socket", gf.socket)
		if err != nil {
			stop()
			return nil, err
		}
		start(lis, nil)
		stops = append(stops, func() { os.Remove(gf.socket) })
	}
	return stop, nil
}
