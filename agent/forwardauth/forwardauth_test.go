package forwardauth

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/agenttest"
	"github.com/allot-io/allot/agent/httplimit"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// authz builds a forward-auth subrequest as a gateway sends it: to the
// authorization endpoint, whatever the original request's method.
func authz(method string, headers ...string) *http.Request {
	r := httptest.NewRequest(method, "/v1/authz", nil)
	r.RemoteAddr = "192.0.2.9:51000"
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestForwardAuthAttributes checks where each attribute is read from, with
// the default header names and with configured ones.
func TestForwardAuthAttributes(t *testing.T) {
	def := newHandler(Config{})
	custom := newHandler(Config{TenantHeader: "x-org", PlanHeader: "X-Tier", UserHeader: "X-Auth-User",
		RouteHeaders: []string{"X-Path"}, IPHeader: NoHeader, PriorityHeader: "X-Prio", CostHeader: "X-Weight", TrustedHops: 1})
	keyed := newHandler(Config{APIKeyHeader: "X-Api-Key"})
	sum := sha256.Sum256([]byte("sk_live_secret"))
	keyTenant := hex.EncodeToString(sum[:])[:16]
	for _, tc := range []struct {
		name    string
		f       *forwardAuth
		r       *http.Request
		want    agent.Request
		wantErr string
	}{
		{"defaults", def, authz("GET", "X-Tenant", "acme", "X-Plan", "pro", "X-User", "alice",
			"X-Original-URI", "/v1/search?q=x&page=2", "X-Real-IP", "203.0.113.7", "X-Priority", "batch", "X-Cost", "5"),
			agent.Request{Tenant: "acme", Plan: "pro", User: "alice", Route: "/v1/search", IP: "203.0.113.7", Priority: agent.Batch, Cost: 5}, ""},
		{"any method", def, authz("DELETE", "X-Tenant", "acme"), agent.Request{Tenant: "acme", IP: "192.0.2.9"}, ""},
		{"cost 0 peeks", def, authz("GET", "X-Tenant", "acme", "X-Cost", "0"), agent.Request{Tenant: "acme", IP: "192.0.2.9", Peek: true}, ""},
		{"empty cost is 1", def, authz("GET", "X-Tenant", "acme", "X-Cost", ""), agent.Request{Tenant: "acme", IP: "192.0.2.9"}, ""},
		{"route from X-Forwarded-Uri", def, authz("GET", "X-Forwarded-Uri", "/v1/items?id=3"), agent.Request{Route: "/v1/items", IP: "192.0.2.9"}, ""},
		{"X-Original-URI first", def, authz("GET", "X-Forwarded-Uri", "/b", "X-Original-URI", "/a"), agent.Request{Route: "/a", IP: "192.0.2.9"}, ""},
		{"own path is not the route", def, authz("GET"), agent.Request{IP: "192.0.2.9"}, ""},
		{"right-most X-Forwarded-For", def, authz("GET", "X-Forwarded-For", "198.51.100.1, 198.51.100.2 ,198.51.100.3"), agent.Request{IP: "198.51.100.3"}, ""},
		{"X-Real-IP wins", def, authz("GET", "X-Real-IP", "203.0.113.7", "X-Forwarded-For", "198.51.100.3"), agent.Request{IP: "203.0.113.7"}, ""},
		{"trusted hop skipped", custom, authz("GET", "X-Real-IP", "203.0.113.7", "X-Forwarded-For", "198.51.100.1, 198.51.100.2", "X-Forwarded-For", "10.0.0.1"),
			agent.Request{IP: "198.51.100.2"}, ""},
		{"fewer entries than hops", newHandler(Config{TrustedHops: 3}), authz("GET", "X-Forwarded-For", "198.51.100.1, 10.0.0.1"),
			agent.Request{IP: "198.51.100.1"}, ""},
		{"custom headers", custom, authz("PUT", "X-Org", "globex", "X-Tier", "free", "X-Auth-User", "bob", "X-Path", "/p?x", "X-Prio", "critical", "X-Weight", "0",
			"X-Tenant", "ignored", "X-Original-URI", "/ignored"),
			agent.Request{Tenant: "globex", Plan: "free", User: "bob", Route: "/p", IP: "192.0.2.9", Priority: agent.Critical, Peek: true}, ""},
		{"api key", keyed, authz("GET", "X-Api-Key", "sk_live_secret", "X-Tenant", "spoofed"), agent.Request{Tenant: keyTenant, IP: "192.0.2.9"}, ""},
		{"no api key, no tenant", keyed, authz("GET", "X-Tenant", "spoofed"), agent.Request{IP: "192.0.2.9"}, ""},
		{"unknown priority", def, authz("GET", "X-Priority", "urgent"), agent.Request{}, `X-Priority: "urgent" is not batch`},
		{"cost not a number", def, authz("GET", "X-Cost", "1.5"), agent.Request{}, "X-Cost: must be an integer from 0 to 4294967295"},
		{"negative cost", def, authz("GET", "X-Cost", "-1"), agent.Request{}, "X-Cost: must be an integer"},
		{"cost over MaxCost", def, authz("GET", "X-Cost", strconv.FormatInt(agent.MaxCost+1, 10)), agent.Request{}, "X-Cost: must be an integer"},
		{"tenant too long", def, authz("GET", "X-Tenant", strings.Repeat("t", agent.MaxNameLen+1)), agent.Request{}, "tenant: must be at most 256 bytes"},
		{"route too long", def, authz("GET", "X-Original-URI", "/"+strings.Repeat("r", agent.MaxAttrLen)), agent.Request{}, "route: must be at most 1024 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.f.request(tc.r)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if APIKeyTenant("sk_live_secret") != keyTenant {
		t.Errorf("APIKeyTenant = %q, want %q", APIKeyTenant("sk_live_secret"), keyTenant)
	}
}

// TestForwardAuthHandler checks the answers: 200 with the RateLimit
// headers while admitted, then the refusal with the middleware's headers
// and body under the configured status, and 400 for unreadable headers,
// which are not counted.
func TestForwardAuthHandler(t *testing.T) {
	for _, deny := range []int{0, http.StatusForbidden} {
		t.Run("deny="+strconv.Itoa(deny), func(t *testing.T) {
			clk := agenttest.NewClock()
			clk.Advance(15 * time.Second) // 45 s before the window ends
			a := agenttest.Standalone(t, clk, agenttest.Rule("plan-quota", rules.Tenant, algo.FixedWindow, 3, time.Minute, lease.Quota))
			h := Handler(a, Config{DenyStatus: deny})
			wantDeny := deny
			if deny == 0 {
				wantDeny = http.StatusTooManyRequests
			}
			bad := serve(h, authz("GET", "X-Tenant", "acme", "X-Cost", "lots"))
			if bad.Code != http.StatusBadRequest || !strings.Contains(bad.Body.String(), "X-Cost") {
				t.Fatalf("bad cost: %d %s", bad.Code, bad.Body)
			}
			for i, method := range []string{"GET", "POST", "HEAD"} {
				w := serve(h, authz(method, "X-Tenant", "acme", "X-Original-URI", "/v1/items"))
				if w.Code != http.StatusOK {
					t.Fatalf("%s %d: %d %s", method, i, w.Code, w.Body)
				}
				hd := w.Header()
				for k, v := range map[string]string{
					"RateLimit-Policy":    `"plan-quota";q=3;w=60`,
					"RateLimit":           `"plan-quota";r=` + strconv.Itoa(2-i) + ";t=45",
					"RateLimit-Limit":     "3",
					"RateLimit-Remaining": strconv.Itoa(2 - i),
					"RateLimit-Reset":     "45",
					"Retry-After":         "",
				} {
					if hd.Get(k) != v {
						t.Errorf("admitted %d: %s %q, want %q", i, k, hd.Get(k), v)
					}
				}
			}
			w := serve(h, authz("PATCH", "X-Tenant", "acme"))
			if w.Code != wantDeny {
				t.Fatalf("refusal: %d, want %d", w.Code, wantDeny)
			}
			// The same refusal through the middleware, on an agent in the same state.
			a2 := agenttest.Standalone(t, clk, agenttest.Rule("plan-quota", rules.Tenant, algo.FixedWindow, 3, time.Minute, lease.Quota))
			mw := httplimit.Middleware(a2, func(*http.Request) agent.Request { return agent.Request{Tenant: "acme"} })(http.NotFoundHandler())
			var ref *httptest.ResponseRecorder
			for range 4 {
				ref = serve(mw, authz("GET"))
			}
			if ref.Code != http.StatusTooManyRequests {
				t.Fatalf("middleware: %d", ref.Code)
			}
			for _, k := range []string{"Retry-After", "RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Content-Type", "Cache-Control"} {
				if got, want := w.Header().Get(k), ref.Header().Get(k); got != want || want == "" {
					t.Errorf("refusal %s %q, middleware's %q", k, got, want)
				}
			}
			if w.Header().Get("Retry-After") != "45" {
				t.Errorf("Retry-After %q, want 45", w.Header().Get("Retry-After"))
			}
			if w.Body.String() != ref.Body.String() {
				t.Errorf("body %s, middleware's %s", w.Body, ref.Body)
			}
			var body struct {
				Error             string `json:"error"`
				Scope             string `json:"scope"`
				Rule              string `json:"rule"`
				RetryAfterSeconds *int64 `json:"retry_after_seconds"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if body.Error != "rate_limited" || body.Scope != "tenant" || body.Rule != "plan-quota" || body.RetryAfterSeconds == nil || *body.RetryAfterSeconds != 45 {
				t.Errorf("body %+v", body)
			}
			// Another tenant is unaffected; a cost that never fits has no Retry-After.
			if w := serve(h, authz("GET", "X-Tenant", "globex")); w.Code != http.StatusOK {
				t.Errorf("other tenant: %d", w.Code)
			}
			never := serve(h, authz("GET", "X-Tenant", "initech", "X-Cost", "4"))
			if never.Code != wantDeny || never.Header().Get("Retry-After") != "" || !strings.Contains(never.Body.String(), `"retry_after_seconds":null`) {
				t.Errorf("cost over the limit: %d Retry-After %q %s", never.Code, never.Header().Get("Retry-After"), never.Body)
			}
		})
	}
}

// TestForwardAuthBadNotCounted: a 400 spends nothing.
func TestForwardAuthBadNotCounted(t *testing.T) {
	a := agenttest.Standalone(t, agenttest.NewClock(), agenttest.Rule("q", rules.Tenant, algo.FixedWindow, 1, time.Minute, lease.Quota))
	h := Handler(a, Config{})
	for _, hv := range [][]string{{"X-Priority", "URGENT"}, {"X-Cost", "-3"}, {"X-User", strings.Repeat("u", agent.MaxAttrLen+1)}} {
		w := serve(h, authz("GET", "X-Tenant", "acme", hv[0], hv[1]))
		if w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q", hv[0], w.Code, w.Header().Get("Content-Type"))
		}
	}
	if w := serve(h, authz("GET", "X-Tenant", "acme")); w.Code != http.StatusOK {
		t.Errorf("after three 400s: %d, want 200", w.Code)
	}
}

// TestForwardAuthDenyStatusRange: a status outside 4xx and 5xx is 429.
func TestForwardAuthDenyStatusRange(t *testing.T) {
	for _, s := range []int{-1, 200, 302, 600} {
		if got := newHandler(Config{DenyStatus: s}).deny; got != http.StatusTooManyRequests {
			t.Errorf("DenyStatus %d: %d", s, got)
		}
	}
	if got := newHandler(Config{DenyStatus: 503}).deny; got != 503 {
		t.Errorf("DenyStatus 503: %d", got)
	}
}

// discardWriter is a reusable http.ResponseWriter for the benchmark.
type discardWriter struct {
	h    http.Header
	code int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(code int)        { d.code = code }

// BenchmarkForwardAuth measures /v1/authz as the sidecar serves it, less
// the HTTP server: headers read, Check, the answer's headers written.
//
//	go test -run '^$' -bench ForwardAuth -benchmem ./agent
func BenchmarkForwardAuth(b *testing.B) {
	for _, bc := range []struct {
		name  string
		limit int64
		want  int
	}{{"admitted", 1 << 40, http.StatusOK}, {"refused", 1, http.StatusTooManyRequests}} {
		b.Run(bc.name, func(b *testing.B) {
			a, err := agent.New(agent.Config{Rules: []rules.Rule{agenttest.Rule("plan-quota", rules.Tenant, algo.FixedWindow, bc.limit, time.Hour, lease.Quota)}})
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close(b.Context())
			h := Handler(a, Config{})
			r := authz("GET", "X-Tenant", "acme", "X-User", "alice", "X-Plan", "pro", "X-Original-URI", "/v1/search?q=allot",
				"X-Forwarded-For", "203.0.113.7, 10.0.0.2", "X-Priority", "interactive", "X-Cost", "1")
			w := &discardWriter{h: http.Header{}}
			h.ServeHTTP(w, r) // the refused case's one admission
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
			if w.code != bc.want {
				b.Fatalf("status %d, want %d", w.code, bc.want)
			}
		})
	}
}

// FuzzForwardAuth: whatever headers a gateway forwards, the sidecar
// answers 200, 400 or the deny status, and never panics.
//
//	go test -fuzz FuzzForwardAuth -fuzztime 60s ./agent
func FuzzForwardAuth(f *testing.F) {
	a := agenttest.Standalone(f, agenttest.NewClock(), agenttest.Rule("per-tenant", rules.Tenant, algo.TokenBucket, 5, time.Minute, lease.Quota))
	h := Handler(a, Config{APIKeyHeader: "X-Api-Key", TrustedHops: 1, DenyStatus: 403})
	f.Add("acme", "", "/v1/items?q=1", "10.0.0.1, 10.0.0.2", "batch", "3")
	f.Add("", "key-1", "", "", "", "")
	f.Add("acme", "", "", "", "", "0")
	f.Add("x", "", "/", "::1", "nope", "-1")
	f.Add(strings.Repeat("t", 300), "", "", "", "exempt", "4294967296")
	f.Fuzz(func(t *testing.T, tenant, key, uri, xff, priority, cost string) {
		r := authz("GET", "X-Tenant", tenant, "X-Api-Key", key, "X-Original-URI", uri, "X-Forwarded-For", xff, "X-Priority", priority, "X-Cost", cost)
		switch code := serve(h, r).Code; code {
		case 200, 400, 403:
		default:
			t.Fatalf("status %d", code)
		}
	})
}
