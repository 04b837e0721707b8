package httproute

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// TestMuxServesAndRemembers: a Mux routes as ServeMux does (methods,
// wildcards, 404 and 405) and lists what was registered, in order.
func TestMuxServesAndRemembers(t *testing.T) {
	m := NewMux()
	m.HandleFunc("GET /v1/items/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("item " + r.PathValue("id"))) })
	m.Handle("/any", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(r.Method)) }))
	if got, want := m.Patterns(), []string{"GET /v1/items/{id}", "/any"}; !slices.Equal(got, want) {
		t.Fatalf("Patterns() = %q, want %q", got, want)
	}
	m.Patterns()[0] = "changed"
	if m.Patterns()[0] != "GET /v1/items/{id}" {
		t.Fatal("Patterns() shares its slice with the Mux")
	}
	for _, tc := range []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/v1/items/7", 200, "item 7"},
		{"POST", "/v1/items/7", 405, ""},
		{"DELETE", "/any", 200, "DELETE"},
		{"GET", "/nowhere", 404, ""},
	} {
		w := httptest.NewRecorder()
		m.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, nil))
		if w.Code != tc.code || (tc.body != "" && w.Body.String() != tc.body) {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, w.Code, w.Body.String(), tc.code, tc.body)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		want    Route
	}{
		{"/v1/check", Route{Path: "/v1/check"}},
		{"GET /v1/overrides/{rule}/{tenant}", Route{Method: "GET", Path: "/v1/overrides/{rule}/{tenant}"}},
		{"GET  /ui/", Route{Method: "GET", Path: "/ui/"}},
		{"POST example.com/x", Route{Method: "POST", Host: "example.com", Path: "/x"}},
	} {
		if got := Parse(tc.pattern); got != tc.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.pattern, got, tc.want)
		}
	}
}

// TestMuxAddsNoAllocation: routing through a Mux costs what routing
// through a ServeMux does, so the sidecar's /v1/check, which allocates
// nothing of its own, stays so behind it.
func TestMuxAddsNoAllocation(t *testing.T) {
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	m, std := NewMux(), http.NewServeMux()
	m.Handle("/v1/check", noop)
	std.Handle("/v1/check", noop)
	req := httptest.NewRequest(http.MethodPost, "/v1/check", nil)
	w := httptest.NewRecorder()
	viaMux := testing.AllocsPerRun(1000, func() { m.ServeHTTP(w, req) })
	viaStd := testing.AllocsPerRun(1000, func() { std.ServeHTTP(w, req) })
	if viaMux > viaStd {
		t.Errorf("a request through Mux allocates %.1f times, through ServeMux %.1f", viaMux, viaStd)
	}
}
