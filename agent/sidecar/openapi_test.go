package sidecar

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
)

// TestOpenAPIIsTheDocs: the description served is docs/openapi/sidecar.json,
// byte for byte. Edit that file and copy it here (cp
// docs/openapi/sidecar.json agent/sidecar/openapi.json): go:embed cannot
// reach outside the package.
func TestOpenAPIIsTheDocs(t *testing.T) {
	docs, err := os.ReadFile("../../docs/openapi/sidecar.json")
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	OpenAPIHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	served, _ := io.ReadAll(w.Body)
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Errorf("GET /openapi.json: %d %q, want 200 application/json", w.Code, w.Header().Get("Content-Type"))
	}
	if !bytes.Equal(served, docs) {
		t.Errorf("the description served (agent/sidecar/openapi.json, %d bytes) is not docs/openapi/sidecar.json (%d bytes): cp docs/openapi/sidecar.json agent/sidecar/openapi.json",
			len(served), len(docs))
	}
}
