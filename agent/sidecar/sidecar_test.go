package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/agenttest"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// TestCheckHandler drives the sidecar's endpoint as a gateway would: two
// admitted checks with the RateLimit headers, a 429 with Retry-After, and
// every malformed body refused without being counted.
func TestCheckHandler(t *testing.T) {
	clk := agenttest.NewClock()
	a := agenttest.Standalone(t, clk, agenttest.Rule("plan-quota", rules.Tenant, algo.FixedWindow, 2, time.Minute, lease.Quota))
	h := CheckHandler(a)
	post := func(body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)))
		return rec
	}
	bad := []struct {
		name, body string
		code       int
		says       string
	}{
		{"unknown field", `{"tenant":"acme","tenat":"x"}`, 400, "tenat"},
		{"not JSON", `tenant=acme`, 400, "invalid character"},
		{"wrong type", `{"tenant":"acme","cost":"1"}`, 400, "cost must be an integer from 0 to 4294967295, got a JSON string"},
		{"a fraction", `{"tenant":"acme","cost":1.5}`, 400, "cost must be an integer from 0 to 4294967295, got a JSON number 1.5"},
		{"a number for a name", `{"tenant":7}`, 400, "tenant must be a string, got a JSON number"},
		{"negative cost", `{"tenant":"acme","cost":-1}`, 400, "cost"},
		{"unknown priority", `{"tenant":"acme","priority":"urgent"}`, 400, "priority"},
		{"two objects", `{"tenant":"acme"}{"tenant":"acme"}`, 400, "after the JSON object"},
		{"empty", ``, 400, "EOF"},
		{"oversized", `{"tenant":"` + strings.Repeat("a", MaxCheckBody) + `"}`, 413, "bytes"},
	}
	for _, tt := range bad {
		rec := post(tt.body)
		if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.says) {
			t.Errorf("%s: %d %s; want %d naming %q", tt.name, rec.Code, rec.Body.String(), tt.code, tt.says)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/check", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "POST" {
		t.Errorf("GET: %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
	}

	body := `{"tenant":"acme","user":"u1","route":"/search","ip":"203.0.113.7","priority":"interactive","cost":1}`
	for i := 0; i < 2; i++ {
		rec := post(body)
		var d CheckResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		if rec.Code != 200 || !d.Allowed || d.Rule != "plan-quota" || d.Remaining != int64(1-i) || d.RetryAfterSeconds != nil {
			t.Fatalf("check %d (none of the bad ones may count): %d %+v", i, rec.Code, d)
		}
		if rec.Header().Get("RateLimit-Policy") != `"plan-quota";q=2;w=60` {
			t.Errorf("RateLimit-Policy %q", rec.Header().Get("RateLimit-Policy"))
		}
	}
	rec = post(body)
	var d CheckResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 429 || d.Allowed || d.RetryAfterSeconds == nil || *d.RetryAfterSeconds != 60 || rec.Header().Get("Retry-After") != "60" {
		t.Fatalf("third check: %d %+v, Retry-After %q; want 429 retrying in 60 s", rec.Code, d, rec.Header().Get("Retry-After"))
	}
	if d.Scope != "tenant" || d.Limit != 2 || d.PeriodSeconds != 60 {
		t.Errorf("decision %+v", d)
	}
}

// FuzzDecodeCheck: any body is either a request or an ErrBadCheck, never
// a panic, and a decoded request re-encodes to the same request. The
// hand-written decoder agrees with encoding/json on every body, whole or
// cut short by MaxBytesReader: the same request, the same error.
func FuzzDecodeCheck(f *testing.F) {
	f.Add([]byte(`{"tenant":"acme","user":"u1","route":"/search","ip":"203.0.113.7","priority":"interactive","cost":1}`))
	f.Add([]byte(`{"tenant":"acme","cost":-1}`))
	f.Add([]byte(`{"tenant":"acme","cost":0}`))
	f.Add([]byte(`{"cost":0,"cost":null}`))
	f.Add([]byte(`{"cost":null,"cost":-0}`))
	f.Add([]byte(`{"priority":"exempt"} `))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"tenant":"a","tenant":null,"cost":1e3}`))
	f.Add([]byte(`{"Tenant":"\u00e9","cost":01}`))
	f.Add([]byte("{\"user\":\"\xff\",\"plan\":\"caf\xc3\xa9\"}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeCheck(bytes.NewReader(body))
		if want, wantErr := decodeCheckJSON(bytes.NewReader(body)); req != want || fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("DecodeCheck: %+v, %v\nencoding/json: %+v, %v", req, err, want, wantErr)
		}
		limited := func() io.Reader {
			return http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(body)), int64(len(body)*2/3))
		}
		cut, cutErr := DecodeCheck(limited())
		if want, wantErr := decodeCheckJSON(limited()); cut != want || fmt.Sprint(cutErr) != fmt.Sprint(wantErr) {
			t.Fatalf("cut short, DecodeCheck: %+v, %v\nencoding/json: %+v, %v", cut, cutErr, want, wantErr)
		}
		if err != nil {
			if !errors.Is(err, ErrBadCheck) {
				t.Fatalf("error %v does not wrap ErrBadCheck", err)
			}
			return
		}
		if req.Cost < 0 {
			t.Fatalf("negative cost %d accepted", req.Cost)
		}
		if req.Peek && req.Cost != 0 {
			t.Fatalf("a peek of cost %d: only an explicit 0 is one", req.Cost)
		}
		c := CheckRequest{Tenant: req.Tenant, Plan: req.Plan, User: req.User, Route: req.Route, IP: req.IP, Priority: req.Priority.String()}
		if req.Cost != 0 || req.Peek {
			c.Cost = &req.Cost
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeCheck(bytes.NewReader(again))
		if err != nil || back != req {
			t.Fatalf("round trip: %+v → %s → %+v, %v", req, again, back, err)
		}
	})
}

// TestDecodeCheckBounds: a check body beyond the agent's bounds (a cost
// past MaxCost, a tenant or route too long) is refused as invalid, the
// largest allowed is taken.
func TestDecodeCheckBounds(t *testing.T) {
	for _, body := range []string{`{"tenant":"a","cost":4611686018427387904}`, `{"tenant":"a","cost":4294967296}`, `{"tenant":"` + strings.Repeat("t", 257) + `"}`, `{"route":"` + strings.Repeat("r", 1025) + `"}`} {
		if _, err := DecodeCheck(strings.NewReader(body)); !errors.Is(err, agent.ErrInvalidRequest) {
			t.Errorf("DecodeCheck(%.60s…) = %v; want ErrInvalidRequest", body, err)
		}
	}
	if _, err := DecodeCheck(strings.NewReader(`{"tenant":"` + strings.Repeat("t", 256) + `","cost":4294967295}`)); err != nil {
		t.Errorf("the largest tenant and cost: %v", err)
	}
}
