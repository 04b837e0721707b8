package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/forwardauth"
	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/listenerr"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const agentAbout = `
Runs the agent as an HTTP sidecar, for gateways not written in Go. The
gateway asks before serving each request:

  POST /v1/check
  {"tenant":"acme","user":"u1","route":"/search","ip":"203.0.113.7","priority":"interactive","cost":1}

and gets 200 (admitted) or 429 (refused) with the decision as JSON and
the RateLimit and Retry-After headers to pass on to its client. Gateways
with forward-auth (nginx auth_request, Caddy forward_auth, Traefik
ForwardAuth) point it at /v1/authz instead, which reads the attributes
from request headers (the --authz-* flags; docs/gateways.md) and answers
200, or 429 (--authz-deny-status) with the same headers. It also
serves /metrics (Prometheus), /livez (the process serves), /readyz
(it has rules and is not draining; /healthz is its earlier name), and
/v1/status (the rules enforced, those left out and why, rules on their
fail mode, usage waiting to be reported). On SIGTERM it drains: /readyz
fails at once, requests are served for --drain-delay, then the requests
in flight finish within --drain-timeout and the last report goes out.

With --coordinators the agent takes its rules and leases from the cluster;
without, it runs standalone on --rules, each node enforcing whole limits.
Until the cluster's rules arrive it enforces its --rules-cache, if any,
and otherwise follows --until-rules: closed (the default) refuses every
check with 429 and Retry-After, open admits every one, static:FILE
enforces that rules file locally.

--http-addr and --grpc-addr decide checks for whoever reaches them: beyond
loopback they need TLS with client certificates (--http-cert, --http-key,
--http-client-ca), or --insecure. --probe-addr serves only /livez, /readyz
and /metrics, for the kubelet's probes and Prometheus, on any address.`

func agentCommand() *Command {
	return &Command{
		Name: "agent", Usage: "[--coordinators A,B,C] --node-id ID [--rules FILE] [flags]",
		Short: "run the agent as an HTTP sidecar for gateways not written in Go",
		Long:  agentAbout,
		Flags: func(f *flags) runFunc { return runOptions(f, &agentOptions{}) },
	}
}

// agentOptions are allot agent's flags: the agent's Config, and what the
// sidecar around it listens on and how it drains.
type agentOptions struct {
	cfg                         agent.Config
	coords, rulesFile, httpAddr string
	httpSocket, probeAddr       string
	httpCert, httpKey, clientCA string
	insecure                    bool
	until                       untilRulesFlag
	drainDelay, drainTimeout    time.Duration
	creds                       credFlags
	log                         logFlags
	authz                       authzFlags
	grpc                        grpcFlags
	resp                        respFlags
	trace                       traceFlags

	// Set by validate.
	authzCfg forwardauth.Config
}

func (o *agentOptions) register(f *flags) {
	host, _ := os.Hostname()
	f.StringVar(&o.coords, "coordinators", "", "gRPC addresses of the coordinator cluster, comma-separated (empty: standalone)")
	f.StringVar(&o.cfg.NodeID, "node-id", host, "this gateway's name, unique in the fleet")
	f.StringVar(&o.cfg.Region, "region", "default", "the region this gateway runs in; usage is billed under it")
	f.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:7600", "address for /v1/check, /v1/authz, /metrics, /livez and /readyz")
	f.DurationVar(&o.drainDelay, "drain-delay", 0, "on SIGTERM, keep serving this long with /readyz failing, so that load balancers stop sending first (e.g. 5s under Kubernetes)")
	f.DurationVar(&o.drainTimeout, "drain-timeout", 10*time.Second, "on SIGTERM, after --drain-delay, how long requests in flight may take to finish and the last report to reach the coordinators")
	f.StringVar(&o.httpSocket, "http-socket", "", "also serve the HTTP endpoints, in plain HTTP, on this Unix-domain socket (mode 0660): for gateways on the same host")
	f.StringVar(&o.rulesFile, "rules", "", "rules file: enforced as given instead of the cluster's rules (required standalone)")
	f.Var(&o.until, "until-rules", "until the cluster's rules arrive (and no --rules-cache holds them): closed refuses every check (429, Retry-After), open admits every one, abuse rules included, static:FILE enforces that rules file locally (default closed)")
	f.StringVar(&o.cfg.RulesCacheFile, "rules-cache", "", "keep the cluster's last rules in this file (written atomically when they change) and enforce them at start until the cluster's arrive: a restart while the coordinators are out of reach keeps its limits")
	f.StringVar(&o.probeAddr, "probe-addr", "", "also serve /livez, /readyz (/healthz) and /metrics, in plain HTTP, on this address: for the kubelet's probes and Prometheus when --http-addr stays on loopback or requires client certificates; it decides no check")
	f.DurationVar(&o.cfg.ReportInterval, "report-interval", agent.DefaultReportInterval, "how often to report until the cluster sets it")
	f.IntVar(&o.cfg.MaxKeys, "max-keys", agent.DefaultMaxKeys, "keys held per rule and limit; beyond it each intent's bound applies")
	o.log.register(f)
	f.StringVar(&o.httpCert, "http-cert", "", "PEM certificate (with --http-key): serve --http-addr and --grpc-addr over TLS; re-read when it changes")
	f.StringVar(&o.httpKey, "http-key", "", "PEM private key of --http-cert")
	f.StringVar(&o.clientCA, "http-client-ca", "", "PEM CA bundle: callers of --http-addr and --grpc-addr must present a client certificate it signed (mutual TLS; needs --http-cert); re-read when it changes")
	f.BoolVar(&o.insecure, "insecure", false, "allow --http-addr or --grpc-addr beyond loopback without client certificates: anyone who reaches them may spend tenants' limits")
	o.creds.register(f)
	o.authz.register(f)
	o.grpc.register(f)
	o.resp.register(f)
	o.trace.register(f)
}

// validate checks the flags against each other and reads the rules files
// they name into the agent's Config: every mistake in them is a usage
// error before anything listens.
func (o *agentOptions) validate() error {
	var err error
	if o.authzCfg, err = o.authz.config("agent"); err != nil {
		return err
	}
	o.cfg.Coordinators = splitList(o.coords)
	if len(o.cfg.Coordinators) == 0 && o.rulesFile == "" {
		return usagef("agent", "standalone (no --coordinators) needs --rules")
	}
	if o.cfg.NodeID == "" {
		return usagef("agent", "--node-id is required")
	}
	if o.rulesFile != "" {
		rs, err := rules.Load(o.rulesFile)
		if err != nil {
			return &usageError{err: err}
		}
		o.cfg.Rules = rs
	}
	if err := startupFlags(&o.cfg, &o.until, o.rulesFile); err != nil {
		return err
	}
	if err := o.log.validate("agent"); err != nil {
		return err
	}
	if (o.httpCert == "") != (o.httpKey == "") {
		return usagef("agent", "--http-cert and --http-key go together")
	}
	if o.clientCA != "" && o.httpCert == "" {
		return usagef("agent", "--http-client-ca verifies callers over TLS: it needs --http-cert and --http-key")
	}
	if err := checkExposed(o.deciders(), o.httpCert != "", o.clientCA != "", o.insecure); err != nil {
		return err
	}
	return checkExposed([]listener{{"--resp-addr", o.resp.addr}}, false, false, o.insecure)
}

// deciders are the listeners that decide checks for whoever reaches
// them.
func (o *agentOptions) deciders() []listener {
	return []listener{{"--http-addr", o.httpAddr}, {"--grpc-addr", o.grpc.addr}}
}

// run starts the agent and its servers, serves until ctx ends or a
// listener fails, then drains: readiness fails first, the requests in
// flight finish, and the last report goes out.
func (o *agentOptions) run(ctx context.Context, e *env, f *flags) error {
	cfg := o.cfg
	logger, err := o.log.logger("agent", "allot-agent", e.stderr)
	if err != nil {
		return err
	}
	cfg.CAFile, cfg.CertFile, cfg.KeyFile, cfg.TokenFile = o.creds.ca, o.creds.cert, o.creds.key, o.creds.tokenFile
	cfg.Logger = logger
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoGauge())
	cfg.Registerer = reg
	tp, err := o.trace.provider(ctx, "agent", "allot-agent", cfg.NodeID, cfg.Region, logger.Named("tracing"))
	if err != nil {
		return err
	}
	// Flushed last, after the agent's last report.
	defer flushTraces(tp, logger)
	cfg.TracerProvider = tp.TracerProviderOrNil()

	ls, err := o.listen(logger)
	if err != nil {
		return err
	}
	if o.httpSocket != "" {
		defer os.Remove(o.httpSocket)
	}
	a, err := agent.New(cfg)
	if err != nil {
		ls.close()
		if errors.Is(err, agent.ErrInvalidConfig) {
			return &usageError{err: fmt.Errorf("%w%s", err, f.notOnCommandLine())}
		}
		return err
	}
	sh := newSidecarHTTP(a, o.authzCfg, reg)
	stopGRPC, err := o.grpc.serve(a, o.authzCfg, ls.serverTLS, reg, logger)
	if err != nil {
		ls.close()
		_ = a.Close(context.Background())
		return err
	}
	stopRESP, err := o.resp.serve(a, logger)
	if err != nil {
		stopGRPC()
		ls.close()
		_ = a.Close(context.Background())
		return err
	}
	var unused, probeUnused unusedConns
	srv := &http.Server{Handler: sh.mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, ConnState: unused.track}
	probeSrv := &http.Server{Handler: sh.probe, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, ConnState: probeUnused.track}
	served := make(chan error, 3)
	go func() { served <- srv.Serve(ls.http) }()
	if ls.socket != nil {
		go func() { served <- srv.Serve(ls.socket) }()
	}
	if ls.probe != nil {
		go func() { served <- probeSrv.Serve(ls.probe) }()
	}
	mode := "coordinated"
	if len(cfg.Coordinators) == 0 {
		mode = "standalone"
	}
	cfg.Logger.Info("agent sidecar running", "node", cfg.NodeID, "http", ls.scheme+"://"+ls.http.Addr().String(), "socket", o.httpSocket, "mode", mode,
		"client_certificates", o.clientCA != "", "probe", o.probeAddr)
	if o.insecure && checkExposed(o.deciders(), o.httpCert != "", o.clientCA != "", false) != nil {
		cfg.Logger.Warn("deciding checks beyond loopback for any caller (--insecure): whoever reaches the address spends tenants' limits", "http", o.httpAddr, "grpc", o.grpc.addr)
	}
	select {
	case <-ctx.Done():
		cfg.Logger.Info("shutting down: draining", "drain_delay", o.drainDelay, "drain_timeout", o.drainTimeout)
	case err = <-served:
		cfg.Logger.Error("shutting down: a listener failed", "error", err)
	}
	// Drain: readiness fails first, and for --drain-delay everything is
	// still served while load balancers notice; then no new connection is
	// taken and the requests in flight finish, within --drain-timeout.
	sh.draining.Store(true)
	if err == nil && o.drainDelay > 0 {
		cfg.Logger.Info("draining: /readyz fails, still serving", "for", o.drainDelay)
		time.Sleep(o.drainDelay)
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), o.drainTimeout)
	defer cancel()
	// Requests in flight finish; connections that never sent one are
	// closed at once, not waited on (unusedConns).
	unused.drain()
	probeUnused.drain()
	_ = srv.Shutdown(closeCtx)
	_ = probeSrv.Shutdown(closeCtx)
	stopGRPC()
	stopRESP()
	// Close sends a last report, so the cluster counts everything admitted.
	cerr := a.Close(closeCtx)
	if cerr != nil && err == nil {
		err = cerr
	}
	if cerr != nil {
		cfg.Logger.Warn("stopped; the last report did not reach the coordinators", "error", cerr)
	} else {
		cfg.Logger.Info("stopped", "node", cfg.NodeID, "mode", mode)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// agentListeners are what the sidecar serves HTTP on: --http-addr, and
// --http-socket and --probe-addr when given (nil otherwise).
type agentListeners struct {
	http, socket, probe net.Listener
	scheme              string      // of --http-addr: http or https
	serverTLS           *tls.Config // nil without --http-cert
}

// listen opens the sidecar's HTTP listeners; a failure closes those it
// opened.
func (o *agentOptions) listen(logger hclog.Logger) (*agentListeners, error) {
	lis, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return nil, fmt.Errorf("listening: %w", listenerr.Explain("http-addr", o.httpAddr, err))
	}
	ls := &agentListeners{http: lis, scheme: "http"}
	if o.httpCert != "" {
		r, err := auth.NewReloader(auth.TLSFiles{CertFile: o.httpCert, KeyFile: o.httpKey, CAFile: o.clientCA}, func(err error) {
			logger.Error("a changed --http-cert, --http-key or --http-client-ca could not be loaded", "error", err)
		})
		if err != nil {
			lis.Close()
			return nil, &usageError{err: err}
		}
		ls.serverTLS = r.ServerConfig(o.clientCA != "")
		ls.http, ls.scheme = tls.NewListener(lis, ls.serverTLS), "https"
	}
	if o.probeAddr != "" {
		if ls.probe, err = net.Listen("tcp", o.probeAddr); err != nil {
			ls.http.Close()
			return nil, fmt.Errorf("listening on --probe-addr %s: %w", o.probeAddr, err)
		}
	}
	if o.httpSocket != "" {
		if ls.socket, err = listenSocket("--http-socket", o.httpSocket); err != nil {
			ls.close()
			return nil, err
		}
	}
	return ls, nil
}

// close closes every listener.
func (ls *agentListeners) close() {
	for _, l := range []net.Listener{ls.http, ls.socket, ls.probe} {
		if l != nil {
			l.Close()
		}
	}
}

// sidecarHTTPMetrics returns a wrapper that counts and times a sidecar
// endpoint's requests: allot_sidecar_http_requests_total{handler,code,
// method} and allot_sidecar_http_request_duration_seconds{handler,method},
// with buckets from 25 µs (a check on loopback) to 400 ms. The check and
// authz endpoints' usual answers start at 0.
func sidecarHTTPMetrics(reg prometheus.Registerer) func(name string, h http.Handler) http.Handler {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_sidecar_http_requests_total", Help: "Requests to the sidecar's HTTP endpoints, by handler (check, authz, status), status code and method.",
	}, []string{"handler", "code", "method"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "allot_sidecar_http_request_duration_seconds", Help: "Time to answer a request to the sidecar's HTTP endpoints, by handler and method.",
		Buckets: prometheus.ExponentialBuckets(0.000025, 2, 15),
	}, []string{"handler", "method"})
	reg.MustRegister(requests, duration)
	for _, h := range []string{"check", "authz"} {
		for _, code := range []string{"200", "429", "400", "413"} {
			requests.WithLabelValues(h, code, "post")
		}
	}
	return func(name string, h http.Handler) http.Handler {
		labels := prometheus.Labels{"handler": name}
		return promhttp.InstrumentHandlerDuration(duration.MustCurryWith(labels),
			promhttp.InstrumentHandlerCounter(requests.MustCurryWith(labels), h))
	}
}
