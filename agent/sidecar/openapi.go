package sidecar

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3 description of the sidecar's HTTP API: every
// endpoint `allot agent` serves. It is docs/openapi/sidecar.json, byte
// for byte (TestOpenAPIIsTheDocs); TestSidecarOpenAPI in cmd/allot holds
// the running sidecar against it.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPIHandler serves the description at GET /openapi.json, for
// clients to generate code from and for tools to read.
func OpenAPIHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPI)
	})
}
