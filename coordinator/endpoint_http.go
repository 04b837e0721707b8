package coordinator

import (
	"bytes"
	"crypto/tls"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/httproute"
	"github.com/allot-io/allot/internal/listenerr"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// startHTTP serves the operational endpoints:
//
//	/metrics     Prometheus metrics
//	/healthz     200 while the process serves
//	/readyz      200 once a leader is known, 503 before
//	/v1/status   this member and the cluster, as JSON
//	/v1/usage    the ledger, as JSON: ?from=&to= (RFC 3339) &tenant= &rule= &region= &page_size= &page_token=
//	             &group_only=true (a shard group's own part of a split region's ledger)
//	/v1/balance  a tenant's balance, as JSON: ?tenant= (required) &plan= (endpoint_balance.go)
//	/v1/notices  threshold notices, as JSON: ?pending=true &tenant= &rule= &page_size= &page_token=
//	/v1/overrides  per-tenant overrides: GET, PUT, DELETE (endpoint_overrides.go)
//	/ui          the status page (endpoint_ui.go), and /v1/ui its data
//	/openapi.json  the OpenAPI description of them all (below)
//
// With TLS configured it serves HTTPS, verifying client certificates
// when given. With credentials configured, /v1/status, /v1/usage and
// /v1/notices need the reader role (a bearer token or a client
// certificate), and /metrics too with MetricsNeedAuth; /v1/balance the
// reader role, or the balance role of the tenant asked for; the health
// endpoints are always open.
func (c *Coordinator) startHTTP() error {
	if c.cfg.HTTPAddr == "" {
		return nil
	}
	mux := httproute.NewMux()
	var metrics http.Handler = promhttp.HandlerFor(c.gather, promhttp.HandlerOpts{})
	if c.cfg.MetricsNeedAuth {
		metrics = c.readerOnly("metrics", metrics)
	}
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if id, _ := c.Leader(); id == "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "no leader")
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /v1/status", c.readerOnly("status", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeProto(w, http.StatusOK, c.Status())
	})))
	mux.Handle("GET /v1/usage", c.readerOnly("usage", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := usageQueryFromURL(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		resp, err := c.regionUsage(r.Context(), q)
		if err != nil {
			code := http.StatusBadRequest
			if status.Code(err) == codes.Unavailable {
				code = http.StatusServiceUnavailable // the sink is away
			}
			writeError(w, code, errors.New(status.Convert(err).Message()))
			return
		}
		writeProto(w, http.StatusOK, resp)
	})))
	mux.HandleFunc("GET /v1/balance", c.balanceHTTP)
	mux.Handle("GET /v1/notices", c.readerOnly("notices", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := noticesQueryFromURL(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		resp, err := c.listNotices(q)
		if err != nil {
			writeError(w, http.StatusBadRequest, errors.New(status.Convert(err).Message()))
			return
		}
		writeProto(w, http.StatusOK, resp)
	})))
	c.uiHandlers(mux)
	c.overridesHTTP(mux)
	mux.HandleFunc("GET /openapi.json", serveOpenAPI)
	var err error
	c.httpLis, err = net.Listen("tcp", c.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("coordinator: http listener: %w", listenerr.Explain("http-addr", c.cfg.HTTPAddr, err))
	}
	lim := c.httpLimits()
	c.http = &http.Server{Handler: mux, ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read, WriteTimeout: lim.write,
		IdleTimeout: lim.idle, MaxHeaderBytes: lim.maxHeader}
	if c.tls != nil {
		c.http.TLSConfig = c.tls.ServerConfig(false)
		c.httpLis = tls.NewListener(c.httpLis, c.http.TLSConfig)
	}
	go func() {
		if err := c.http.Serve(c.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error("http server stopped", "error", err)
		}
	}()
	return nil
}

// httpLimits bound what a connection to the HTTP server may hold
// (docs/security.md#what-a-caller-can-cost). No endpoint streams, so an
// answer has a deadline too: the longest is a usage page, which may wait
// ExportTimeout for the ledger sink.
type httpLimits struct {
	readHeader, read, write, idle time.Duration
	maxHeader                     int
}

func (c *Coordinator) httpLimits() httpLimits {
	l := httpLimits{
		readHeader: 10 * time.Second,
		read:       30 * time.Second, // a request and its body: PUT /v1/overrides takes 8 MiB
		write:      max(2*time.Minute, c.cfg.ExportTimeout+30*time.Second),
		idle:       2 * time.Minute,
		maxHeader:  64 << 10,
	}
	if h := c.cfg.hooks; h != nil && h.httpLimits != nil {
		h.httpLimits(&l)
	}
	return l
}

// readerOnly lets through callers with the reader role (or admin), when
// credentials are configured.
func (c *Coordinator) readerOnly(name string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := c.authz
		if !a.Enabled() {
			h.ServeHTTP(w, r)
			return
		}
		id, reason := a.Identify(r.Header.Values("Authorization"), r.TLS)
		p := &peer.Peer{Addr: remoteAddr(r.RemoteAddr)}
		switch {
		case reason != "":
			a.Refuse(p, "http:"+name, reason, "")
			w.Header().Set("WWW-Authenticate", `Bearer realm="allot"`)
			writeError(w, http.StatusUnauthorized, errors.New("authentication required: present a valid bearer token or client certificate"))
		case !id.Permits(auth.Reader):
			a.Refuse(p, "http:"+name, authz.ReasonWrongRole, id.Name())
			writeError(w, http.StatusForbidden, errors.New("permission denied: this endpoint needs the reader role"))
		default:
			h.ServeHTTP(w, r)
		}
	})
}

type addrString string

func (a addrString) Network() string { return "tcp" }
func (a addrString) String() string  { return string(a) }

func remoteAddr(s string) net.Addr { return addrString(s) }

func usageQueryFromURL(r *http.Request) (*allotpb.UsageQuery, error) {
	v := r.URL.Query()
	q := &allotpb.UsageQuery{Tenant: v.Get("tenant"), Rule: v.Get("rule"), Region: v.Get("region"), PageToken: v.Get("page_token")}
	for name, dst := range map[string]**timestamppb.Timestamp{"from": &q.From, "to": &q.To} {
		if s := v.Get(name); s != "" {
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return nil, fmt.Errorf("%s: want an RFC 3339 time such as 2026-11-29T10:00:00Z: %w", name, err)
			}
			*dst = timestamppb.New(t)
		}
	}
	if s := v.Get("group_only"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("group_only: want true or false, not %q", s)
		}
		q.GroupOnly = b
	}
	if s := v.Get("page_size"); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("page_size: %w", err)
		}
		q.PageSize = uint32(n)
	}
	return q, nil
}

// writeProto writes m as compact JSON. protojson varies its whitespace
// from build to build on purpose; compacting it gives scripts and docs the
// same bytes from every release.
func writeProto(w http.ResponseWriter, code int, m proto.Message) {
	b, err := protojson.MarshalOptions{EmitUnpopulated: true, UseProtoNames: true}.Marshal(m)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("compacting JSON: %w", err))
		return
	}
	out.WriteByte('\n')
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(out.Bytes())
}

func writeError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, "{\"error\":%q}\n", err.Error())
}

// openAPI is the OpenAPI 3 description of the coordinator's HTTP API,
// every route startHTTP registers. It is docs/openapi/coordinator.json,
// byte for byte; TestCoordinatorOpenAPI holds a running coordinator
// against it.
//
//go:embed openapi.json
var openAPI []byte

// serveOpenAPI answers GET /openapi.json: open, as it holds no data.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}
