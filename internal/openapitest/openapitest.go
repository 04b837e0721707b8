// Package openapitest holds a running HTTP server against the OpenAPI 3
// description of its API (docs/openapi), both ways:
//
//   - every route the server registers is described (CheckRoutes, given
//     the patterns of its httproute.Mux);
//   - every request a test sends through Do, and the answer it gets, is
//     validated against the operation's description for that status
//     code, by github.com/getkin/kin-openapi;
//   - every operation described is routed by the server, not refused
//     with a 405 or the mux's 404 (Routed), and was reached by a request
//     of the test; every status code described was seen or its
//     absence explained (Coverage).
//
// It is test support: only tests import it.
package openapitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/httproute"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// Doc is a loaded and validated OpenAPI description, and what the
// requests sent through it have exercised.
type Doc struct {
	name string
	spec *openapi3.T

	mu       sync.Mutex
	answered map[string]bool // "METHOD PATH": answered by the operation's handler
	statuses map[string]bool // "METHOD PATH STATUS": seen and validated
}

// Load parses data, an OpenAPI 3 document named name (for messages), and
// validates it as a document; it fails t when either fails.
func Load(t testing.TB, name string, data []byte) *Doc {
	t.Helper()
	loader := openapi3.NewLoader()
	spec, err := loader.LoadFromData(data)
	if err != nil {
		t.Fatalf("%s: loading the OpenAPI description: %v", name, err)
	}
	if err := spec.Validate(loader.Context); err != nil {
		t.Fatalf("%s: not a valid OpenAPI description: %v", name, err)
	}
	return &Doc{name: name, spec: spec, answered: map[string]bool{}, statuses: map[string]bool{}}
}

// Operation is one method on one path of the description.
type Operation struct {
	Method, Path string
}

func (o Operation) String() string { return o.Method + " " + o.Path }

// Operations lists every operation described, sorted by path and method.
func (d *Doc) Operations() []Operation {
	var ops []Operation
	for path, item := range d.spec.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, Operation{Method: method, Path: path})
		}
	}
	slices.SortFunc(ops, func(a, b Operation) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	return ops
}

// CheckRoutes fails t for each pattern registered on a server's mux that
// the description lacks: a pattern with a method needs that operation on
// its path; one without (any method) needs its path with at least one
// operation. A GET pattern also serves HEAD, which the description need
// not name.
func (d *Doc) CheckRoutes(t testing.TB, patterns []string) {
	t.Helper()
	if len(patterns) == 0 {
		t.Errorf("%s: no route registered to check", d.name)
	}
	for _, p := range patterns {
		r := httproute.Parse(p)
		if r.Host != "" {
			t.Errorf("%s: route %q names a host, which the description cannot", d.name, p)
			continue
		}
		item := d.spec.Paths.Value(r.Path)
		switch {
		case item == nil || len(item.Operations()) == 0:
			t.Errorf("%s: the server registers %q, and the description has no path %s", d.name, p, r.Path)
		case r.Method != "" && item.GetOperation(r.Method) == nil:
			t.Errorf("%s: the server registers %q, and the description has no %s on %s", d.name, p, r.Method, r.Path)
		}
	}
}

// Case is one request to send and the status its answer must have.
type Case struct {
	// Method and Path name the operation described; Path is its
	// template ("/v1/overrides/{rule}/{tenant}"), filled from Params.
	Method, Path string
	Params       map[string]string
	// Query is the raw query string, without "?".
	Query  string
	Header http.Header
	Body   string
	// BadRequest marks a request that breaks the description on
	// purpose, to see its error answer: it is not validated, its
	// answer is.
	BadRequest bool
	// Status is the status code the answer must have.
	Status int
}

// Do sends c to the server at base ("http://127.0.0.1:7600") with
// client, checks the answer's status, validates the request (unless
// c.BadRequest) and the answer against the description, and returns the
// answer's headers and body. Failures are reported on t.
func (d *Doc) Do(t testing.TB, client *http.Client, base string, c Case) (http.Header, []byte) {
	t.Helper()
	op := Operation{Method: c.Method, Path: c.Path}
	item := d.spec.Paths.Value(c.Path)
	if item == nil || item.GetOperation(c.Method) == nil {
		t.Errorf("%s: %v is not described", d.name, op)
		return nil, nil
	}
	path := c.Path
	for k, v := range c.Params {
		path = strings.ReplaceAll(path, "{"+k+"}", url.PathEscape(v))
	}
	target := base + path
	if c.Query != "" {
		target += "?" + c.Query
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, c.Method, target, strings.NewReader(c.Body))
	if err != nil {
		t.Fatalf("%v: %v", op, err)
	}
	for k, vs := range c.Header {
		req.Header[k] = vs
	}
	if c.Body != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%v %s: %v", op, target, err)
		return nil, nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%v %s: reading the answer: %v", op, target, err)
		return nil, nil
	}
	show := fmt.Sprintf("%s %s answered %d %q", c.Method, target, resp.StatusCode, trim(body))
	if resp.StatusCode != c.Status {
		t.Errorf("%s: %s, want %d", d.name, show, c.Status)
	}
	if notRouted(resp.StatusCode, resp.Header) {
		t.Errorf("%s: %s: the server does not route %v", d.name, show, op)
		return resp.Header, body
	}

	route := &routers.Route{Spec: d.spec, Path: c.Path, PathItem: item, Method: c.Method, Operation: item.GetOperation(c.Method)}
	// A fresh request with the same parts: the one sent has had its
	// body read.
	again, err := http.NewRequestWithContext(ctx, c.Method, target, strings.NewReader(c.Body))
	if err != nil {
		t.Fatalf("%v: %v", op, err)
	}
	again.Header = req.Header.Clone()
	in := &openapi3filter.RequestValidationInput{Request: again, PathParams: c.Params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}}
	if !c.BadRequest {
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			t.Errorf("%s: the request of %s does not match the description of %v: %v", d.name, show, op, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: in.Options}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("%s: %s: the answer does not match the description of %v: %v", d.name, show, op, err)
	}
	d.mu.Lock()
	d.answered[op.String()] = true
	d.statuses[op.String()+" "+strconv.Itoa(resp.StatusCode)] = true
	d.mu.Unlock()
	return resp.Header, body
}

// Routed sends one bare request to every operation described, its path
// parameters filled with "x" and no body, and fails t for each the
// server does not route: a 405, or ServeMux's own 404. Whatever else it
// answers (a 400 for the missing body, a 401 for the missing
// credential) shows a handler took it. Run it against a server under
// test only: a bare request may still do something (the sidecar's
// /v1/authz decides, and counts, a check with no attributes).
func (d *Doc) Routed(t testing.TB, client *http.Client, base string) {
	t.Helper()
	for _, op := range d.Operations() {
		path := op.Path
		for _, p := range d.spec.Paths.Value(op.Path).Parameters {
			path = strings.ReplaceAll(path, "{"+p.Value.Name+"}", "x")
		}
		for _, p := range d.spec.Paths.Value(op.Path).GetOperation(op.Method).Parameters {
			path = strings.ReplaceAll(path, "{"+p.Value.Name+"}", "x")
		}
		if err := routed(client, op.Method, base+path); err != nil {
			t.Errorf("%s: %v is described: %v", d.name, op, err)
		}
	}
}

func routed(client *http.Client, method, target string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, http.NoBody)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if notRouted(resp.StatusCode, resp.Header) {
		return fmt.Errorf("%s %s: the server does not route it (%s)", method, target, resp.Status)
	}
	return nil
}

// notRouted reports whether an answer says the operation is not served:
// a 405, from ServeMux or from a handler that takes other methods, or
// ServeMux's own 404 for a path it does not route (plain text, where
// a handler's 404, such as a missing override, is JSON).
func notRouted(code int, h http.Header) bool {
	return code == http.StatusMethodNotAllowed ||
		code == http.StatusNotFound && strings.HasPrefix(h.Get("Content-Type"), "text/plain")
}

func trim(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// Coverage fails t for each operation described that no request through
// Do reached, and for each status code described that no answer had,
// unless unseen explains why ("GET /v1/usage 503": "the ledger sink …").
// An explanation for a status that was seen, or that is not described,
// fails too: the list stays true.
func (d *Doc) Coverage(t testing.TB, unseen map[string]string) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	described := map[string]bool{}
	for _, op := range d.Operations() {
		if !d.answered[op.String()] {
			t.Errorf("%s: %v is described and no request of the test reached it", d.name, op)
		}
		for code := range d.spec.Paths.Value(op.Path).GetOperation(op.Method).Responses.Map() {
			key := op.String() + " " + code
			described[key] = true
			switch _, why := unseen[key]; {
			case d.statuses[key] && why:
				t.Errorf("%s: %s was seen, and is listed as not exercised", d.name, key)
			case !d.statuses[key] && !why:
				t.Errorf("%s: %s is described and no answer of the test had it", d.name, key)
			}
		}
	}
	keys := make([]string, 0, len(unseen))
	for k := range unseen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !described[k] {
			t.Errorf("%s: %s is listed as not exercised, and is not described", d.name, k)
		}
	}
}
