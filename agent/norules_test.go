package agent

import (
	"context"
	"encoding/json"
	"github.com/allot-io/allot/internal/testwait"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// noRulesAgent is an agent that will have no rules: its coordinators are
// out of reach.
func noRulesAgent(t *testing.T, policy UntilRules) *Agent {
	t.Helper()
	a, err := New(Config{Coordinators: []string{deadCoordinator}, NodeID: "gw-1", ReportInterval: 200 * time.Millisecond,
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
	closed := noRulesAgent(t, UntilRulesClosed)
	post := func(a *Agent) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		CheckHandler(a).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(`{"tenant":"acme"}`)))
		return w
	}
	w := post(closed)
	var resp CheckResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || w.Header().Get("Ratelimit-Policy") != "" ||
		resp.Allowed || !resp.NoRules || resp.RetryAfterSeconds == nil || *resp.RetryAfterSeconds != 1 || resp.Rule != "" {
		t.Errorf("POST /v1/check, closed: %d %v %s", w.Code, w.Header(), w.Body)
	}

	for _, deny := range []int{0, http.StatusForbidden} {
		w = httptest.NewRecorder()
		ForwardAuthHandler(closed, ForwardAuthConfig{DenyStatus: deny}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/authz", nil))
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
	Middleware(closed, func(*http.Request) Request { return Request{Tenant: "acme"} })(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true })).
		ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if reached || w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"error":"no_rules"`) {
		t.Errorf("Middleware, closed: reached %v, %d %s", reached, w.Code, w.Body)
	}

	got, err := NewSidecarServer(closed).Check(context.Background(), &allotpb.CheckRequest{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetAllowed() || got.GetRule() != "" || got.GetRetryAfterNanos() != int64(200*time.Millisecond) || !DecisionFromProto(got).NoRules {
		t.Errorf("SidecarService.Check, closed: %v", got)
	}
	if DecisionFromProto(&allotpb.CheckResponse{RetryAfterNanos: -1}).NoRules {
		t.Error("a cost that never fits read back as NoRules")
	}

	ds := closed.CheckDescriptors("edge", []Descriptor{{Entries: []Entry{{"remote_address", "10.0.0.1"}}}}, 1, nil)
	if len(ds) != 1 || ds[0].Allowed || !ds[0].NoRules {
		t.Errorf("CheckDescriptors, closed: %+v", ds)
	}
	st := RefusalStatus(closed.Check(Request{}))
	var reason string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
		}
	}
	if reason != "NO_RULES" || !strings.Contains(st.Message(), "no rules yet") {
		t.Errorf("RefusalStatus, closed: %v, reason %q", st, reason)
	}

	open := noRulesAgent(t, UntilRulesOpen)
	w = post(open)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"no_rules":true`) || w.Header().Get("Retry-After") != "" {
		t.Errorf("POST /v1/check, open: %d %v %s", w.Code, w.Header(), w.Body)
	}
	if d := open.Check(Request{Tenant: "acme", Cost: MaxCost}); !d.Allowed || !d.NoRules {
		t.Errorf("Check, open: %+v", d)
	}
}

// TestUntilRulesAllocatesNothing: checks decided without the cluster's
// rules, by the policy or by start-up rules, allocate nothing either. The
// agents' reports are refused once and not sent again during the runs:
// AllocsPerRun counts every goroutine's allocations.
func TestUntilRulesAllocatesNothing(t *testing.T) {
	sc := newSecuredCluster(t, clusterRulesYAML)
	tf := filepath.Join(t.TempDir(), "token")
	tokenFile(t, tf, sc.tokens["gw-2"])
	req := Request{Tenant: "acme", User: "u-42", Route: "/v1/search", IP: "203.0.113.9"}
	for _, policy := range []UntilRules{UntilRulesClosed, UntilRulesOpen, UntilRulesStatic} {
		cfg := Config{Coordinators: []string{sc.addr}, NodeID: "gw-1", Region: "eu-west", TokenFile: tf, ReportInterval: time.Hour, UntilRules: policy}
		if policy == UntilRulesStatic {
			cfg.StartupRules = fourLevels()
		}
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close(context.Background())
		testwait.For(t, 10*time.Second, "the first report refused", func() bool { return a.Status().ReportsRefused != nil })
		a.Check(req)
		if n := testing.AllocsPerRun(1000, func() { a.Check(req) }); n != 0 {
			t.Errorf("%v: %v allocations per Check", policy, n)
		}
	}
}
