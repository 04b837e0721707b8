package sidecar_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/forwardauth"
	"github.com/allot-io/allot/agent/grpclimit"
	"github.com/allot-io/allot/agent/httplimit"
	"github.com/allot-io/allot/agent/sidecar"

	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// deadCoordinator is an address where no coordinator answers.
const deadCoordinator = "127.0.0.1:1"

// noRulesAgent is an agent that will have no rules: its coordinators are
// out of reach.
func noRulesAgent(t *testing.T, policy agent.UntilRules) *agent.Agent {
	t.Helper()
	a, err := agent.New(agent.Config{Coordinators: []string{deadCoordinator}, NodeID: "gw-1", ReportInterval: 200 * time.Millisecond,
		UntilRules: policy, CloseTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

// TestNoRulesAnswers: without rules, every way of asking gets the same
// answer. Closed: refused as a rate limit would be (429, or the deny
// status, with Retry-After; OVER_LIMIT; allowed false with a retry), so
// that every gateway already refuses it, and marked no_rules. Open:
// admitted, marked no_rules on HTTP.
func TestNoRulesAnswers(t *testing.T) {
	closed := noRulesAgent(t, agent.UntilRulesClosed)
	post := func(a *agent.Agent) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		sidecar.CheckHandler(a).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(`{"tenant":"acme"}`)))
		return w
	}
	w := post(closed)
	var resp sidecar.CheckResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || w.Header().Get("Ratelimit-Policy") != "" ||
		resp.Allowed || !resp.NoRules || resp.RetryAfterSeconds == nil || *resp.RetryAfterSeconds != 1 || resp.Rule != "" {
		t.Errorf("POST /v1/check, closed: %d %v %s", w.Code, w.Header(), w.Body)
	}

	for _, deny := range []int{0, http.StatusForbidden} {
		w = httptest.NewRecorder()
		forwardauth.Handler(closed, forwardauth.Config{DenyStatus: deny}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/authz", nil))
		want := http.StatusTooManyRequests
		if deny != 0 {
			want = deny
		}
		if w.Code != want || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), `"error":"no_rules"`) {
			t.Errorf("/v1/authz (deny %d), closed: %d %v %s", deny, w.Code, w.Header(), w.Body)
		}
	}

	w = httptest.NewRecorder()
	reached := false
	httplimit.Middleware(closed, func(*http.Request) agent.Request { return agent.Request{Tenant: "acme"} })(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true })).
		ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if reached || w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"error":"no_rules"`) {
		t.Errorf("Middleware, closed: reached %v, %d %s", reached, w.Code, w.Body)
	}

	got, err := sidecar.NewSidecarServer(closed).Check(context.Background(), &allotpb.CheckRequest{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetAllowed() || got.GetRule() != "" || got.GetRetryAfterNanos() != int64(200*time.Millisecond) || !sidecar.DecisionFromProto(got).NoRules {
		t.Errorf("SidecarService.Check, closed: %v", got)
	}
	if sidecar.DecisionFromProto(&allotpb.CheckResponse{RetryAfterNanos: -1}).NoRules {
		t.Error("a cost that never fits read back as NoRules")
	}

	ds := closed.CheckDescriptors("edge", []agent.Descriptor{{Entries: []agent.Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}, 1, nil)
	if len(ds) != 1 || ds[0].Allowed || !ds[0].NoRules {
		t.Errorf("CheckDescriptors, closed: %+v", ds)
	}
	st := grpclimit.RefusalStatus(closed.Check(agent.Request{}))
	var reason string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
		}
	}
	if reason != "NO_RULES" || !strings.Contains(st.Message(), "no rules yet") {
		t.Errorf("RefusalStatus, closed: %v, reason %q", st, reason)
	}

	open := noRulesAgent(t, agent.UntilRulesOpen)
	w = post(open)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"no_rules":true`) || w.Header().Get("Retry-After") != "" {
		t.Errorf("POST /v1/check, open: %d %v %s", w.Code, w.Header(), w.Body)
	}
	if d := open.Check(agent.Request{Tenant: "acme", Cost: agent.MaxCost}); !d.Allowed || !d.NoRules {
		t.Errorf("Check, open: %+v", d)
	}
}
