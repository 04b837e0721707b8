package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/httplimit"
	"github.com/allot-io/allot/rules"
)

// TestAgentDocExamples checks docs/agent.md's refusal through
// httplimit.Middleware against a real one.
func TestAgentDocExamples(t *testing.T) {
	const path = "../../docs/agent.md"
	doc := readDocOutputs(t, path)
	seen := map[string]bool{}
	checkDocOutput(t, doc, "middleware-429", middlewareRefusal(t), seen)
	requireDocOutputsSeen(t, path, doc, seen)
}

// middlewareRefusal is the 1,001st request in a minute through
// httplimit.Middleware, with a fixed_window tenant rule of 1,000 a minute in
// a standalone agent, as httputil.DumpResponse prints it.
func middlewareRefusal(t *testing.T) string {
	t.Helper()
	rs, err := rules.Parse("rules.yaml", []byte("rules:\n  - {name: plan-quota, scope: tenant, algorithm: fixed_window, limit: 1000, period: 1m, intent: quota}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{NodeID: "gw-1", Rules: rs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(t.Context()) })
	extract := func(r *http.Request) agent.Request { return agent.Request{Tenant: r.Header.Get("X-Tenant")} }
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := httptest.NewServer(httplimit.Middleware(a, extract)(api))
	defer srv.Close()
	for i := 1; i <= 1001; i++ {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/search", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Tenant", "acme")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if i <= 1000 {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d: %s", i, resp.Status)
			}
			continue
		}
		dump, err := httputil.DumpResponse(resp, true)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("request 1001: %s", dump)
		}
		return strings.ReplaceAll(string(dump), "\r", "")
	}
	panic("unreachable")
}
