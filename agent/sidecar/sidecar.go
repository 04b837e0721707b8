package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/httplimit"
	"github.com/allot-io/allot/internal/tracing"
	"go.opentelemetry.io/otel/trace"
)

// MaxCheckBody bounds the body of a sidecar check request.
const MaxCheckBody = 64 << 10

// CheckRequest is the JSON body of the sidecar's POST /v1/check.
type CheckRequest struct {
	Tenant   string `json:"tenant"`
	Plan     string `json:"plan"`
	User     string `json:"user"`
	Route    string `json:"route"`
	IP       string `json:"ip"`
	Priority string `json:"priority"`
	// Cost is the request's weight; absent (or null) means 1. An explicit
	// 0 is a peek (agent.Request.Peek): the decision a request of cost 1
	// would get now, spending and billing nothing. A pointer, so that
	// encoding/json tells 0 from absent.
	Cost *int64 `json:"cost"`
}

// CheckResponse is the sidecar's answer: the decision, as JSON.
type CheckResponse struct {
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule,omitempty"`
	Scope   string `json:"scope,omitempty"`
	Limit   int64  `json:"limit"`
	// PeriodSeconds is the rule's period.
	PeriodSeconds float64 `json:"period_seconds"`
	Remaining     int64   `json:"remaining"`
	// RetryAfterSeconds is set on a refusal that may be retried, as in
	// the Retry-After header; null when admitted or never admissible.
	RetryAfterSeconds *int64 `json:"retry_after_seconds"`
	// Reason explains a refusal no retry can turn into an admission (its
	// retry_after_seconds is null): the cost is more than the rule ever
	// admits at once. Empty otherwise.
	Reason            string  `json:"reason,omitempty"`
	ResetAfterSeconds float64 `json:"reset_after_seconds"`
	// Fallback is set when the deciding rule ran on its fail mode, cut
	// off from the coordinators.
	Fallback bool `json:"fallback"`
	// NoRules is set when the sidecar had no rules and its --until-rules
	// policy decided: refused (closed, 429 with Retry-After) or admitted
	// (open).
	NoRules bool `json:"no_rules,omitempty"`
	// Reservation names an admitted request of POST /v1/reserve, to be
	// settled with POST /v1/settle; empty from /v1/check, and on a
	// refusal.
	Reservation string `json:"reservation,omitempty"`
}

// ErrBadCheck is wrapped by every error decoding a check request.
var ErrBadCheck = errors.New("agent: bad check request")

// DecodeCheck reads a check request strictly: one JSON object, no unknown
// fields, no trailing data, a known priority, and the bounds of
// ValidateRequest (names, attributes, a cost from 0 to MaxCost).
//
// It decides exactly as encoding/json does (see checkjson.go): the body
// is read into a pooled buffer and a common one is scanned by hand, any
// other handed to decodeCheckJSON.
func DecodeCheck(r io.Reader) (agent.Request, error) {
	bp := getBuf()
	defer putBuf(bp)
	return decodeCheckBuffered(r, bp)
}

// decodeCheckJSON is DecodeCheck through encoding/json: the reference the
// hand-written scanner must agree with, and its fallback for any body it
// does not decide itself, so such bodies get encoding/json's result and
// error, word for word.
func decodeCheckJSON(r io.Reader) (agent.Request, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var c CheckRequest
	if err := dec.Decode(&c); err != nil {
		return agent.Request{}, fmt.Errorf("%w: %w", ErrBadCheck, checkFieldTypes.clarify(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return agent.Request{}, fmt.Errorf("%w: unexpected data after the JSON object", ErrBadCheck)
	}
	var cost int64
	if c.Cost != nil {
		cost = *c.Cost
	}
	return checkRequest(&c, cost, c.Cost != nil)
}

// checkRequest turns a decoded body, with its cost and whether one was
// given, into a Request: its priority parsed and its bounds checked, as
// both decoding paths do. An explicit cost of 0 is a peek.
func checkRequest(c *CheckRequest, cost int64, costSet bool) (agent.Request, error) {
	p, err := agent.ParsePriority(c.Priority)
	if err != nil {
		return agent.Request{}, fmt.Errorf("%w: priority: %q is not batch, interactive, critical or exempt", ErrBadCheck, c.Priority)
	}
	req := agent.Request{Tenant: c.Tenant, Plan: c.Plan, User: c.User, Route: c.Route, IP: c.IP, Priority: p, Cost: cost, Peek: costSet && cost == 0}
	if err := agent.ValidateRequest(req); err != nil {
		return agent.Request{}, fmt.Errorf("%w: %w", ErrBadCheck, err)
	}
	return req, nil
}

// CheckHandler serves the sidecar's POST /v1/check for gateways not
// written in Go: the body is a CheckRequest; the answer is 200 when
// admitted and 429 when refused, with the same RateLimit and Retry-After
// headers as Middleware and the decision as a CheckResponse. A malformed
// body is answered 400, an oversized one 413, and neither is counted.
//
// With the agent's tracer (Config.TracerProvider) each request has a
// server span, a child of the traceparent header it came with, that
// names the tenant, the cost, the decision and the rule that decided.
// Without, the request costs one nil check more than it did untraced.
func CheckHandler(a *agent.Agent) http.Handler { return checkHandler(a, "/v1/check", false) }

// ReserveHandler serves POST /v1/reserve: a check, as CheckHandler's, at
// the body's cost taken as an estimate; an admitted request's answer
// names a reservation, which POST /v1/settle settles at the actual cost
// (agent.Agent.Reserve).
func ReserveHandler(a *agent.Agent) http.Handler { return checkHandler(a, "/v1/reserve", true) }

func checkHandler(a *agent.Agent, path string, reserve bool) http.Handler {
	tr := a.Tracer()
	route := tracing.NewRoute(path)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tr == nil {
			serveCheck(a, w, r, nil, reserve)
			return
		}
		// The decision is made in memory: no call carries the span's
		// context on.
		_, span := route.Start(tr, r)
		tracing.EndHTTP(span, serveCheck(a, w, r, span, reserve))
	})
}

// serveCheck answers one check and returns its status code; span, when
// not nil and recording, is given the request's and the decision's
// attributes.
func serveCheck(a *agent.Agent, w http.ResponseWriter, r *http.Request, span trace.Span, reserve bool) int {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httplimit.WriteError(w, http.StatusMethodNotAllowed, "use POST with a JSON body")
		return http.StatusMethodNotAllowed
	}
	// One pooled buffer serves the body and then the answer: the
	// decoded Request holds no reference to it.
	bp := getBuf()
	defer putBuf(bp)
	req, err := decodeCheckBuffered(http.MaxBytesReader(w, r.Body, MaxCheckBody), bp)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			httplimit.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", MaxCheckBody))
			return http.StatusRequestEntityTooLarge
		}
		httplimit.WriteError(w, http.StatusBadRequest, err.Error())
		return http.StatusBadRequest
	}
	var d agent.Decision
	var res agent.Reservation
	if reserve {
		d, res = a.Reserve(req)
	} else {
		d = a.Check(req)
	}
	if span != nil && span.IsRecording() {
		span.SetAttributes(tracing.Tenant.String(req.Tenant), tracing.Cost.Int64(max(req.Cost, 1)),
			tracing.Allowed.Bool(d.Allowed), tracing.Rule.String(d.Rule), tracing.Fallback.Bool(d.Fallback))
	}
	h := w.Header()
	httplimit.SetHeaders(h, d)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	resp := CheckResponse{Allowed: d.Allowed, Rule: d.Rule, Scope: d.Scope, Limit: d.Limit,
		PeriodSeconds: d.Period.Seconds(), Remaining: max(d.Remaining, 0),
		ResetAfterSeconds: d.ResetAfter.Seconds(), Fallback: d.Fallback, NoRules: d.NoRules}
	if res.ID() != 0 {
		resp.Reservation = strconv.FormatUint(res.ID(), 10)
	}
	code := http.StatusOK
	if !d.Allowed {
		code = http.StatusTooManyRequests
		if d.RetryAfter >= 0 {
			s := httplimit.RetryAfterSeconds(d)
			resp.RetryAfterSeconds = &s
		} else {
			resp.Reason = httplimit.NeverAdmissible(d, max(req.Cost, 1))
		}
	}
	// As json.NewEncoder(w).Encode(resp) did, a response that cannot
	// be encoded (never, from a Decision) gets the status alone.
	body, err := appendCheckResponse((*bp)[:0], &resp)
	*bp = body
	w.WriteHeader(code)
	if err == nil {
		_, _ = w.Write(body)
	}
	return code
}

// Traced gives an endpoint of the sidecar other than /v1/check (whose
// handler traces itself) a server span per request, named for route, a
// child of the request's traceparent, with the status code answered. It
// is h itself when the agent's tracing is off.
func Traced(a *agent.Agent, route string, h http.Handler) http.Handler {
	tr := a.Tracer()
	if tr == nil {
		return h
	}
	rt := tracing.NewRoute(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := rt.Start(tr, r)
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r.WithContext(ctx))
		tracing.EndHTTP(span, sw.code)
	})
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// StatusHandler serves the agent's Status as JSON: the rules enforced,
// those left out and why, the rules on their fail mode, and the usage
// batches waiting for the coordinators.
func StatusHandler(a *agent.Agent) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			httplimit.WriteError(w, http.StatusMethodNotAllowed, "use GET")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(a.Status())
	})
}
