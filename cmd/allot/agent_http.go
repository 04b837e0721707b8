package main

import (
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/forwardauth"
	"github.com/allot-io/allot/agent/sidecar"
	"github.com/allot-io/allot/internal/httproute"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// sidecarHTTP is what the sidecar serves over HTTP: mux on --http-addr
// and --http-socket, probe on --probe-addr, and the switch that fails
// /readyz while it drains. Every route of both muxes is described in
// docs/openapi/sidecar.json, served at /openapi.json
// (TestSidecarOpenAPI fails on one that is not).
type sidecarHTTP struct {
	mux, probe *httproute.Mux
	draining   *atomic.Bool
}

// newSidecarHTTP builds the sidecar's endpoints on a's decisions and
// status, authzCfg's forward-auth, and reg's metrics.
func newSidecarHTTP(a *agent.Agent, authzCfg forwardauth.Config, reg *prometheus.Registry) *sidecarHTTP {
	instrument := sidecarHTTPMetrics(reg)
	mux := httproute.NewMux()
	mux.Handle("/v1/check", instrument("check", sidecar.CheckHandler(a)))
	mux.Handle("/v1/reserve", instrument("reserve", sidecar.ReserveHandler(a)))
	mux.Handle("/v1/settle", instrument("settle", sidecar.Traced(a, "/v1/settle", sidecar.SettleHandler(a))))
	mux.Handle("/v1/authz", instrument("authz", sidecar.Traced(a, "/v1/authz", forwardauth.Handler(a, authzCfg))))
	mux.Handle("/v1/status", instrument("status", sidecar.Traced(a, "/v1/status", sidecar.StatusHandler(a))))
	mux.Handle("GET /openapi.json", sidecar.OpenAPIHandler())
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux.Handle("/metrics", metrics)
	// /livez: the process serves (a liveness probe must not restart a
	// sidecar whose coordinators are slow). /readyz: it has rules and is
	// not draining. /healthz is /readyz, its earlier name.
	draining := &atomic.Bool{}
	live := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("/livez", live)
	ready := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-a.Ready():
		default:
			http.Error(w, "waiting for rules from the coordinators", http.StatusServiceUnavailable)
			return
		}
		if draining.Load() {
			http.Error(w, "draining: shutting down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("/readyz", ready)
	mux.Handle("/healthz", ready)
	return &sidecarHTTP{mux: mux, probe: probeMux(live, ready, metrics), draining: draining}
}
