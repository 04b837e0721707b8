package httplimit_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/agenttest"
	"github.com/allot-io/allot/agent/httplimit"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/client/retry"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

func fromHeaders(r *http.Request) agent.Request {
	p, _ := agent.ParsePriority(r.Header.Get("X-agent.Priority"))
	return agent.Request{Tenant: r.Header.Get("X-Tenant"), User: r.Header.Get("X-User"), Route: r.URL.Path, Priority: p}
}

// TestMiddleware429 checks the refusal exactly as the design and the IETF
// draft define it, parsing every header and the body back.
func TestMiddleware429(t *testing.T) {
	clk := agenttest.NewClock()
	clk.Advance(15 * time.Second) // 10:00:15, 45 s before the window ends
	quota := agenttest.Rule("plan-quota", rules.Tenant, algo.FixedWindow, 3, time.Minute, lease.Quota)
	a := agenttest.Standalone(t, clk, quota)
	srv := httptest.NewServer(httplimit.Middleware(a, fromHeaders)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})))
	defer srv.Close()
	get := func() *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/items", nil)
		req.Header.Set("X-Tenant", "acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := 0; i < 3; i++ {
		resp := get()
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		if got, want := resp.Header.Get("RateLimit-Remaining"), strconv.Itoa(2-i); got != want {
			t.Errorf("admitted request %d: RateLimit-Remaining %q, want %q", i, got, want)
		}
		if resp.Header.Get("Retry-After") != "" {
			t.Error("Retry-After on an admitted request")
		}
	}
	resp := get()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	h := resp.Header
	want := map[string]string{
		"Retry-After":         "45",
		"RateLimit-Limit":     "3",
		"RateLimit-Remaining": "0",
		"RateLimit-Reset":     "45",
		"Content-Type":        "application/json",
		"Cache-Control":       "no-store",
	}
	for k, v := range want {
		if h.Get(k) != v {
			t.Errorf("%s: %q, want %q", k, h.Get(k), v)
		}
	}
	// Structured-field lists (RFC 9651): a quoted policy name with
	// parameters.
	policy := regexp.MustCompile(`^"plan-quota";q=(\d+);w=(\d+)$`).FindStringSubmatch(h.Get("RateLimit-Policy"))
	if policy == nil || policy[1] != "3" || policy[2] != "60" {
		t.Errorf("RateLimit-Policy %q, want \"plan-quota\";q=3;w=60", h.Get("RateLimit-Policy"))
	}
	state := regexp.MustCompile(`^"plan-quota";r=(\d+);t=(\d+)$`).FindStringSubmatch(h.Get("RateLimit"))
	if state == nil || state[1] != "0" || state[2] != "45" {
		t.Errorf("RateLimit %q, want \"plan-quota\";r=0;t=45", h.Get("RateLimit"))
	}
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body["error"] != "rate_limited" || body["scope"] != "tenant" || body["retry_after_seconds"] != 45.0 {
		t.Errorf("body %v", body)
	}
	// The client helper honours Retry-After and reads the draft's fields.
	if wait, ok := retry.HeaderWait(h, time.Now()); !ok || wait != 45*time.Second {
		t.Errorf("retry.HeaderWait = %v, %v", wait, ok)
	}
}

func TestRetryAfterNeverZero(t *testing.T) {
	for _, tt := range []struct {
		retry time.Duration
		want  int64
	}{{time.Millisecond, 1}, {999 * time.Millisecond, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}, {0, 1}} {
		if got := httplimit.RetryAfterSeconds(agent.Decision{RetryAfter: tt.retry}); got != tt.want {
			t.Errorf("RetryAfter %v: %d seconds, want %d", tt.retry, got, tt.want)
		}
	}
	// Never: no Retry-After, null in the body, and the reason.
	rec := httptest.NewRecorder()
	httplimit.WriteRefusal(rec, agent.Decision{Rule: "r", Scope: "user", Limit: 1, Period: time.Second, RetryAfter: -1})
	var body map[string]any
	json.Unmarshal(rec.Body.Bytes(), &body)
	const reason = "the request's cost is more than rule r ever admits at once (its limit is 1 per 1s): no retry will be admitted; split the request or raise the limit"
	if rec.Header().Get("Retry-After") != "" || body["retry_after_seconds"] != nil || body["reason"] != reason {
		t.Errorf("never: Retry-After %q, body %v", rec.Header().Get("Retry-After"), body)
	}
}

// TestRetryTransportAgainstMiddleware: the client helper waits out the
// refusal and gets through once the window turns, without retrying at once.
func TestRetryTransportAgainstMiddleware(t *testing.T) {
	clk := agenttest.NewClock()
	a := agenttest.Standalone(t, clk, agenttest.Rule("user", rules.User, algo.FixedWindow, 1, time.Second, lease.Capacity))
	srv := httptest.NewServer(httplimit.Middleware(a, fromHeaders)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()
	var waits []time.Duration
	tr, err := retry.New(nil, retry.Options{Sleep: func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		clk.Advance(d) // the window turns while the client waits
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-User", "u1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if len(waits) != 1 || waits[0] < time.Second {
		t.Fatalf("waits %v: want one wait of Retry-After (1s)", waits)
	}
}

// TestRefusalHeadersAgreePerAlgorithm: for every algorithm a 429's
// RateLimit t and RateLimit-Reset say what Retry-After says, so that no
// header promises quota later than another (a GCRA refusal once said t=3
// with Retry-After 1), and q is the rule's limit per w, its period.
func TestRefusalHeadersAgreePerAlgorithm(t *testing.T) {
	for _, alg := range algo.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			clk := agenttest.NewClock()
			clk.Advance(15 * time.Second)
			r := agenttest.Rule("plan-quota", rules.Tenant, alg, 3, time.Minute, lease.Quota)
			if alg == algo.TokenBucket || alg == algo.GCRA {
				r.Burst = 2
			}
			a := agenttest.Standalone(t, clk, r)
			var d agent.Decision
			for range 10 {
				if d = a.Check(agent.Request{Tenant: "acme"}); !d.Allowed {
					break
				}
			}
			if d.Allowed {
				t.Fatal("never refused")
			}
			h := http.Header{}
			httplimit.SetHeaders(h, d)
			retryAfter := h.Get("Retry-After")
			seconds, err := strconv.Atoi(retryAfter)
			if err != nil || seconds < 1 {
				t.Fatalf("Retry-After %q", retryAfter)
			}
			if got := h.Get("RateLimit-Reset"); got != retryAfter {
				t.Errorf("RateLimit-Reset %s, Retry-After %s", got, retryAfter)
			}
			if got, want := h.Get("RateLimit"), `"plan-quota";r=0;t=`+retryAfter; got != want {
				t.Errorf("RateLimit %q, want %q", got, want)
			}
			if got := h.Get("RateLimit-Policy"); got != `"plan-quota";q=3;w=60` {
				t.Errorf("RateLimit-Policy %q", got)
			}
			// And the client helper waits exactly that long.
			if wait, ok := retry.HeaderWait(h, time.Now()); !ok || wait.Round(time.Second) != time.Duration(seconds)*time.Second {
				t.Errorf("retry.HeaderWait %v, %v; Retry-After %s", wait, ok, retryAfter)
			}
		})
	}
}
