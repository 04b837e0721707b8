package forwardauth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/agenttest"
	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"github.com/prometheus/client_golang/prometheus"
)

// TestForwardAuthPeek: a cost header of 0 peeks: after n requests of a
// limit of 3 it shows what they left, any number of peeks leaves the 3
// whole, at the limit it is refused with Retry-After, and no peek is
// counted as a decision. Through a real HTTP server.
func TestForwardAuthPeek(t *testing.T) {
	for _, tc := range []struct {
		name    string
		checks  int
		allowed bool
	}{{"fresh", 0, true}, {"after 1", 1, true}, {"after 2", 2, true}, {"at the limit", 3, false}} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			a, err := agent.New(agent.Config{Clock: agenttest.NewClock(), Registerer: reg,
				Rules: []rules.Rule{agenttest.Rule("quota", rules.Tenant, algo.FixedWindow, 3, time.Hour, lease.Quota)}})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(context.Background())
			srv := httptest.NewServer(Handler(a, Config{}))
			defer srv.Close()
			get := func(cost ...string) *http.Response {
				t.Helper()
				req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/authz", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Tenant", "acme")
				if len(cost) > 0 {
					req.Header.Set("X-Cost", cost[0])
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp
			}
			for i := range tc.checks {
				if resp := get(); resp.StatusCode != http.StatusOK { // absent: 1
					t.Fatalf("check %d: %d", i+1, resp.StatusCode)
				}
			}
			want := http.StatusOK
			if !tc.allowed {
				want = http.StatusTooManyRequests
			}
			for i := range 20 {
				resp := get("0")
				if resp.StatusCode != want || resp.Header.Get("RateLimit-Remaining") != strconv.Itoa(3-tc.checks) {
					t.Fatalf("peek %d: %d, RateLimit-Remaining %q; want %d, %d", i+1, resp.StatusCode, resp.Header.Get("RateLimit-Remaining"), want, 3-tc.checks)
				}
				if !tc.allowed && resp.Header.Get("Retry-After") == "" {
					t.Fatalf("peek at the limit without Retry-After")
				}
			}
			fams, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var decided, peeked float64
			for _, f := range fams {
				for _, m := range f.GetMetric() {
					switch f.GetName() {
					case "allot_agent_decisions_total":
						decided += m.GetCounter().GetValue()
					case "allot_agent_peeks_total":
						peeked += m.GetCounter().GetValue()
					}
				}
			}
			if decided != float64(tc.checks) || peeked != 20 {
				t.Errorf("%v decisions, %v peeks; want %d, 20", decided, peeked, tc.checks)
			}
			for i := tc.checks; i < 3; i++ {
				if resp := get(""); resp.StatusCode != http.StatusOK { // empty: 1
					t.Fatalf("check %d after the peeks: %d", i+1, resp.StatusCode)
				}
			}
			if resp := get("1"); resp.StatusCode != http.StatusTooManyRequests {
				t.Errorf("a fourth check: %d", resp.StatusCode)
			}
		})
	}
}
