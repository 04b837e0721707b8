package openapitest

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/allot-io/allot/internal/httproute"
)

// recorder is a testing.TB that collects the errors reported to it.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

const doc = `{
  "openapi": "3.0.3",
  "info": {"title": "t", "version": "1"},
  "paths": {
    "/v1/item/{id}": {
      "get": {
        "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
        "responses": {
          "200": {"description": "the item", "content": {"application/json": {"schema": {
            "type": "object", "required": ["id", "n"],
            "properties": {"id": {"type": "string"}, "n": {"type": "integer"}}}}}},
          "404": {"description": "none", "content": {"application/json": {"schema": {"type": "object"}}}}
        }
      }
    }
  }
}`

// TestDocCatchesDrift: an answer that breaks its schema, an undescribed
// status, an undescribed route and an unexercised status each fail.
func TestDocCatchesDrift(t *testing.T) {
	mux := httproute.NewMux()
	mux.HandleFunc("GET /v1/item/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.PathValue("id") {
		case "good":
			fmt.Fprint(w, `{"id":"good","n":1}`)
		case "bad":
			fmt.Fprint(w, `{"id":"bad","n":"one"}`)
		default:
			w.WriteHeader(http.StatusTeapot)
			fmt.Fprint(w, `{}`)
		}
	})
	mux.HandleFunc("POST /v1/undescribed", func(http.ResponseWriter, *http.Request) {})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + lis.Addr().String()

	d := Load(t, "test", []byte(doc))
	get := func(id string, status int) Case {
		return Case{Method: "GET", Path: "/v1/item/{id}", Params: map[string]string{"id": id}, Status: status}
	}
	for _, tc := range []struct {
		name string
		run  func(tb testing.TB)
		want string // in the one error expected; "" for none
	}{
		{"a good answer", func(tb testing.TB) { d.Do(tb, http.DefaultClient, base, get("good", 200)) }, ""},
		{"a field of the wrong type", func(tb testing.TB) { d.Do(tb, http.DefaultClient, base, get("bad", 200)) }, "does not match the description"},
		{"an undescribed status", func(tb testing.TB) { d.Do(tb, http.DefaultClient, base, get("teapot", 418)) }, "status is not supported"},
		{"an undescribed route", func(tb testing.TB) { d.CheckRoutes(tb, mux.Patterns()) }, `registers "POST /v1/undescribed"`},
		{"a status never seen", func(tb testing.TB) { d.Coverage(tb, nil) }, "GET /v1/item/{id} 404 is described and no answer"},
		{"a status explained", func(tb testing.TB) { d.Coverage(tb, map[string]string{"GET /v1/item/{id} 404": "none is missing"}) }, ""},
	} {
		r := &recorder{TB: t}
		tc.run(r)
		switch {
		case tc.want == "" && len(r.errs) > 0:
			t.Errorf("%s: unexpected errors %q", tc.name, r.errs)
		case tc.want != "" && (len(r.errs) != 1 || !strings.Contains(r.errs[0], tc.want)):
			t.Errorf("%s: errors %q, want one containing %q", tc.name, r.errs, tc.want)
		}
	}
}

// TestRoutedCatchesAnUnservedOperation: an operation described that the
// server does not route (a path it lacks, a method it refuses) fails,
// and one its handler refuses for want of a body does not.
func TestRoutedCatchesAnUnservedOperation(t *testing.T) {
	mux := httproute.NewMux()
	mux.HandleFunc("PUT /v1/item/{id}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":"no body"}`)
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })

	const described = `{"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {
	  "/v1/item/{id}": {
	    "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
	    "put": {"responses": {"400": {"description": "no body"}}},
	    "get": {"responses": {"200": {"description": "the item"}}}},
	  "/v1/gone": {"get": {"responses": {"200": {"description": "gone"}}}}}}`
	r := &recorder{TB: t}
	Load(t, "test", []byte(described)).Routed(r, http.DefaultClient, "http://"+lis.Addr().String())
	got := strings.Join(r.errs, "\n")
	for _, want := range []string{"GET /v1/gone is described", "GET /v1/item/{id} is described"} {
		if !strings.Contains(got, want) {
			t.Errorf("errors %q, want one naming %q", r.errs, want)
		}
	}
	if len(r.errs) != 2 {
		t.Errorf("errors %q, want 2 (PUT is routed)", r.errs)
	}
}
