// Package httproute is an http.ServeMux that remembers what was
// registered on it. A server builds its routes on a Mux and serves them
// exactly as the ServeMux would; a test reads Patterns to hold every
// route the server registers against the OpenAPI description of its API
// (docs/openapi), so that a route added without its description fails.
package httproute

import (
	"net/http"
	"slices"
	"strings"
)

// Mux serves like http.ServeMux and keeps its patterns, in the order
// they were registered. Register every route before serving: like
// ServeMux, it is safe for concurrent use, but Patterns is meant for
// tests, read once the routes are built.
type Mux struct {
	mux      http.ServeMux
	patterns []string
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{} }

// Handle registers h for pattern, as http.ServeMux.Handle does (and
// panics as it does on a conflicting or malformed pattern).
func (m *Mux) Handle(pattern string, h http.Handler) {
	m.mux.Handle(pattern, h)
	m.patterns = append(m.patterns, pattern)
}

// HandleFunc registers f for pattern, as http.ServeMux.HandleFunc does.
func (m *Mux) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(f))
}

// ServeHTTP dispatches r as http.ServeMux does.
func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.mux.ServeHTTP(w, r) }

// Patterns returns a copy of the patterns registered, in order.
func (m *Mux) Patterns() []string { return slices.Clone(m.patterns) }

// Route is a registered pattern taken apart: its method ("" for any)
// and its path, wildcards as written ("/v1/overrides/{rule}/{tenant}").
// A pattern with a host is not split: Host holds it.
type Route struct {
	Method, Host, Path string
}

// Parse splits a ServeMux pattern, "[METHOD ][HOST]/[PATH]", into its
// parts. It does not validate it: ServeMux did, when it was registered.
func Parse(pattern string) Route {
	var r Route
	rest := pattern
	if method, p, ok := strings.Cut(pattern, " "); ok {
		r.Method, rest = method, strings.TrimLeft(p, " \t")
	}
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		r.Host = rest
		return r
	}
	r.Host, r.Path = rest[:i], rest[i:]
	return r
}
