package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/httplimit"
	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// fixedClock keeps the example's output the same on every run.
type fixedClock struct{}

func (fixedClock) Now() time.Time { return time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC) }

// A gateway embeds an agent and puts its middleware in front of its
// handlers. This one is standalone (no coordinators: each node enforces the
// whole limit); in production, Config.Coordinators lists the coordinator
// cluster and the rules come from it.
func Example() {
	a, err := agent.New(agent.Config{
		NodeID: "gw-17",
		Region: "eu-west",
		Rules: []rules.Rule{{
			Name: "plan-quota", Scope: rules.Tenant, Intent: lease.Quota,
			Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute,
		}},
		Clock: fixedClock{},
	})
	if err != nil {
		panic(err)
	}
	defer a.Close(context.Background())

	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	extract := func(r *http.Request) agent.Request {
		return agent.Request{Tenant: r.Header.Get("X-Tenant"), Route: r.URL.Path, Cost: 1}
	}
	srv := httptest.NewServer(httplimit.Middleware(a, extract)(api))
	defer srv.Close()

	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/search", nil)
		req.Header.Set("X-Tenant", "acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "RateLimit:", resp.Header.Get("RateLimit"))
		if resp.StatusCode == http.StatusTooManyRequests {
			fmt.Println("Retry-After:", resp.Header.Get("Retry-After"))
			fmt.Print(string(body))
		}
	}
	// Output:
	// 200 RateLimit: "plan-quota";r=1;t=60
	// 200 RateLimit: "plan-quota";r=0;t=60
	// 429 RateLimit: "plan-quota";r=0;t=60
	// Retry-After: 60
	// {"error":"rate_limited","scope":"tenant","rule":"plan-quota","retry_after_seconds":60}
}

// Check is the whole API on the request path: no network, no lock held
// across requests, nothing allocated for keys seen before.
func ExampleAgent_Check() {
	a, _ := agent.New(agent.Config{
		Rules: []rules.Rule{{Name: "per-user", Scope: rules.User, Intent: lease.Capacity,
			Algorithm: algo.GCRA, Limit: 10, Period: time.Second}},
		Clock: fixedClock{},
	})
	defer a.Close(context.Background())
	d := a.Check(agent.Request{Tenant: "acme", User: "u1", Priority: agent.Interactive, Cost: 1})
	fmt.Println(d.Allowed, d.Rule, d.Scope)
	d = a.Check(agent.Request{Tenant: "acme", User: "u1", Cost: 1})
	fmt.Println(d.Allowed, d.RetryAfter)
	// Output:
	// true per-user user
	// false 100ms
}
