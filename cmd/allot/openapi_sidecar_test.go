package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/agenttest"
	"github.com/allot-io/allot/agent/forwardauth"
	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/openapitest"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"github.com/prometheus/client_golang/prometheus"
)

// serveSidecar serves h on a loopback port until the test ends, and
// returns its base URL.
func serveSidecar(t *testing.T, h http.Handler) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + lis.Addr().String()
}

// TestSidecarOpenAPI holds the sidecar's HTTP endpoints, as allot agent
// builds them (newSidecarHTTP) and serves them on loopback, against
// docs/openapi/sidecar.json: every route registered is described, every
// operation described is answered, each request below and its answer
// (successes and errors) validate against the description, and every
// status code described is seen. /openapi.json serves the docs file.
func TestSidecarOpenAPI(t *testing.T) {
	const path = "../../docs/openapi/sidecar.json"
	docs, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := openapitest.Load(t, path, docs)

	// A standalone sidecar: 5 a minute per tenant, on a clock that
	// stands still, so that the window never turns mid-test.
	a := agenttest.Standalone(t, agenttest.NewClock(), agenttest.Rule("plan-quota", rules.Tenant, algo.FixedWindow, 5, time.Minute, lease.Quota))
	sh := newSidecarHTTP(a, forwardauth.Config{}, prometheus.NewRegistry())
	d.CheckRoutes(t, sh.mux.Patterns())
	d.CheckRoutes(t, sh.probe.Patterns())
	base, probe := serveSidecar(t, sh.mux), serveSidecar(t, sh.probe)

	// A sidecar whose coordinators never answer: no rules, closed.
	waiting, err := agent.New(agent.Config{Coordinators: []string{"127.0.0.1:1"}, NodeID: "gw-2", ReportInterval: 200 * time.Millisecond,
		CloseTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiting.Close(context.Background()) })
	noRules := serveSidecar(t, newSidecarHTTP(waiting, forwardauth.Config{}, prometheus.NewRegistry()).mux)

	client := &http.Client{Timeout: 30 * time.Second}
	d.Routed(t, client, base)
	do := func(base string, c openapitest.Case) (http.Header, []byte) {
		t.Helper()
		return d.Do(t, client, base, c)
	}
	post := func(path, body string, status int) openapitest.Case {
		return openapitest.Case{Method: "POST", Path: path, Body: body, Status: status}
	}
	bad := func(c openapitest.Case) openapitest.Case { c.BadRequest = true; return c }
	get := func(path string, status int) openapitest.Case {
		return openapitest.Case{Method: "GET", Path: path, Status: status}
	}

	// Checks: admitted, a peek, spent to the limit, refused with a
	// retry, refused for good (a cost above the limit), and malformed.
	for _, c := range []openapitest.Case{
		post("/v1/check", `{"tenant":"acme","user":"alice","route":"/v1/search","ip":"203.0.113.7","priority":"interactive"}`, 200),
		post("/v1/check", `{"tenant":"acme","cost":0}`, 200),
		post("/v1/check", `{"tenant":"acme","plan":"pro","cost":4}`, 200),
		post("/v1/check", `{"tenant":"acme","cost":null}`, 429),
		post("/v1/check", `{"tenant":"acme","cost":7}`, 429),
		bad(post("/v1/check", `{"tenant":"acme","usr":"x"}`, 400)),
		bad(post("/v1/check", `{"tenant":"acme","priority":"urgent"}`, 400)),
		bad(post("/v1/check", `{"tenant":"`+strings.Repeat("a", 70_000)+`"}`, 413)),
	} {
		do(base, c)
	}
	h, body := do(base, post("/v1/check", `{"tenant":"acme"}`, 429))
	if h.Get("Retry-After") == "" || !bytes.Contains(body, []byte(`"retry_after_seconds":`)) {
		t.Errorf("a refusal that may be retried: Retry-After %q, body %s", h.Get("Retry-After"), body)
	}

	// Reserve and settle.
	_, body = do(base, post("/v1/reserve", `{"tenant":"globex","cost":2}`, 200))
	var reserved struct{ Reservation string }
	if err := json.Unmarshal(body, &reserved); err != nil || reserved.Reservation == "" {
		t.Fatalf("reserve answered %s (%v), want a reservation", body, err)
	}
	settle := `{"reservation":"` + reserved.Reservation + `","cost":3}`
	for _, c := range []openapitest.Case{
		post("/v1/reserve", `{"tenant":"globex","cost":9}`, 429),
		bad(post("/v1/reserve", `{"tenant":`, 400)),
		bad(post("/v1/reserve", `{"tenant":"`+strings.Repeat("a", 70_000)+`"}`, 413)),
		post("/v1/settle", settle, 200),
		post("/v1/settle", settle, 409),
		post("/v1/settle", `{"reservation":"12345","cost":1}`, 404),
		bad(post("/v1/settle", `{"reservation":"12345"}`, 400)),
		bad(post("/v1/settle", `{"reservation":12345,"cost":1}`, 400)),
		bad(post("/v1/settle", `{"reservation":"`+strings.Repeat("1", 2000)+`","cost":1}`, 413)),
	} {
		do(base, c)
	}

	// Forward-auth answers any method from the headers: admitted,
	// refused (a cost above the limit), and a header it cannot read.
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		authz := func(status int, kv ...string) openapitest.Case {
			c := openapitest.Case{Method: m, Path: "/v1/authz", Header: http.Header{}, Status: status}
			for i := 0; i < len(kv); i += 2 {
				c.Header.Set(kv[i], kv[i+1])
			}
			return c
		}
		do(base, authz(200, "X-Tenant", "initech", "X-User", "bob", "X-Original-URI", "/v1/search?q=1", "X-Cost", "0"))
		do(base, authz(429, "X-Tenant", "initech", "X-Cost", "6", "X-Priority", "batch"))
		do(base, bad(authz(400, "X-Tenant", "initech", "X-Priority", "urgent")))
	}

	// What operators and probes read, on --http-addr and --probe-addr.
	for _, b := range []string{base, probe} {
		for _, p := range []string{"/livez", "/readyz", "/healthz", "/metrics"} {
			do(b, get(p, 200))
		}
	}
	do(base, get("/v1/status", 200))
	if _, served := do(base, get("/openapi.json", 200)); !bytes.Equal(served, docs) {
		t.Errorf("GET /openapi.json (%d bytes) is not %s (%d bytes)", len(served), path, len(docs))
	}

	// A sidecar without rules: refused for want of them, not ready.
	do(noRules, post("/v1/check", `{"tenant":"acme"}`, 429))
	do(noRules, openapitest.Case{Method: "GET", Path: "/v1/authz", Header: http.Header{"X-Tenant": {"acme"}}, Status: 429})
	do(noRules, get("/v1/status", 200))
	do(noRules, get("/readyz", 503))
	do(noRules, get("/healthz", 503))
	// Draining after SIGTERM: not ready either.
	sh.draining.Store(true)
	do(base, get("/readyz", 503))

	d.Coverage(t, nil)
}
