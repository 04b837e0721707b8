package coordinator

import (
	_ "embed"
	"net/http"
)

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
