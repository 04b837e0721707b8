package sidecar_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/agenttest"
	"github.com/allot-io/allot/agent/sidecar"
	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// peekAgent enforces 3 per tenant per hour, nothing refilling during a
// test, and registers its metrics in the registry it returns.
func peekAgent(t *testing.T) (*agent.Agent, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	a, err := agent.New(agent.Config{Clock: agenttest.NewClock(), Registerer: reg,
		Rules: []rules.Rule{agenttest.Rule("quota", rules.Tenant, algo.FixedWindow, 3, time.Hour, lease.Quota)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a, reg
}

// counts are a metric's series by their result label.
func counts(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// peekCases: n real checks of a limit of 3, then many peeks, each
// answering as one more request would be, with what the n left.
var peekCases = []struct {
	name    string
	checks  int
	allowed bool
}{
	{"fresh", 0, true},
	{"after 1", 1, true},
	{"after 2", 2, true},
	{"at the limit", 3, false},
}

// TestHTTPPeek: POST /v1/check with an explicit "cost": 0 is a peek: the
// answer one more request would get (200, or 429 with Retry-After), the
// remaining as it stands, nothing spent and nothing counted as a
// decision; an absent cost is still a request of 1. Through a real HTTP
// server.
func TestHTTPPeek(t *testing.T) {
	for _, tc := range peekCases {
		t.Run(tc.name, func(t *testing.T) {
			a, reg := peekAgent(t)
			srv := httptest.NewServer(sidecar.CheckHandler(a))
			defer srv.Close()
			post := func(body string) (int, http.Header, sidecar.CheckResponse) {
				t.Helper()
				resp, err := srv.Client().Post(srv.URL+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var d sidecar.CheckResponse
				if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode, resp.Header, d
			}
			for i := range tc.checks {
				if code, _, _ := post(`{"tenant":"acme"}`); code != http.StatusOK { // no cost: 1
					t.Fatalf("check %d: %d", i+1, code)
				}
			}
			wantCode := http.StatusOK
			if !tc.allowed {
				wantCode = http.StatusTooManyRequests
			}
			for i := range 20 {
				code, h, d := post(`{"tenant":"acme","cost":0}`)
				if code != wantCode || d.Allowed != tc.allowed || d.Rule != "quota" || d.Limit != 3 || d.Remaining != int64(3-tc.checks) {
					t.Fatalf("peek %d: %d %+v; want %d, %d of 3 left", i+1, code, d, wantCode, 3-tc.checks)
				}
				if !tc.allowed && (d.RetryAfterSeconds == nil || *d.RetryAfterSeconds <= 0 || h.Get("Retry-After") == "") {
					t.Fatalf("peek at the limit: %+v, Retry-After %q; want a retry", d, h.Get("Retry-After"))
				}
			}
			if got := counts(t, reg, "allot_agent_decisions_total"); got["admitted"] != float64(tc.checks) || got["denied"] != 0 {
				t.Errorf("decisions %v; want the %d checks admitted, no peek", got, tc.checks)
			}
			if got := counts(t, reg, "allot_agent_peeks_total"); got["admitted"]+got["denied"] != 20 {
				t.Errorf("peeks %v; want 20", got)
			}
			// The peeks spent nothing: what is left is the checks' due.
			for i := tc.checks; i < 3; i++ {
				if code, _, d := post(`{"tenant":"acme","cost":1}`); code != http.StatusOK || d.Remaining != int64(2-i) {
					t.Fatalf("check %d after the peeks: %d %+v", i+1, code, d)
				}
			}
			if code, _, _ := post(`{"tenant":"acme"}`); code != http.StatusTooManyRequests {
				t.Errorf("a fourth check: %d; want 429", code)
			}
		})
	}
}

// grpcSidecar serves a's SidecarService on a loopback port and returns a
// client of it.
func grpcSidecar(t *testing.T, a *agent.Agent) allotpb.SidecarServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	sidecar.NewSidecarServer(a).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return allotpb.NewSidecarServiceClient(cc)
}

// TestGRPCPeek: SidecarService.Check and CheckStream with an explicit
// cost of 0 peek; an absent cost is a request of 1. Through a real gRPC
// server.
func TestGRPCPeek(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range peekCases {
		t.Run(tc.name, func(t *testing.T) {
			a, reg := peekAgent(t)
			c := grpcSidecar(t, a)
			for i := range tc.checks {
				if r, err := c.Check(ctx, &allotpb.CheckRequest{Tenant: "acme"}); err != nil || !r.GetAllowed() {
					t.Fatalf("check %d: %v %v", i+1, r, err)
				}
			}
			stream, err := c.CheckStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			batch := &allotpb.CheckBatch{Id: 7}
			for range 10 {
				batch.Checks = append(batch.Checks, &allotpb.CheckRequest{Tenant: "acme", Cost: proto.Int64(0)})
			}
			if err := stream.Send(batch); err != nil {
				t.Fatal(err)
			}
			res, err := stream.Recv()
			if err != nil || len(res.GetResults()) != 10 {
				t.Fatalf("the batch of peeks: %v %v", res, err)
			}
			stream.CloseSend()
			results := res.GetResults()
			for range 10 {
				r, err := c.Check(ctx, &allotpb.CheckRequest{Tenant: "acme", Cost: proto.Int64(0)})
				if err != nil {
					t.Fatal(err)
				}
				results = append(results, r)
			}
			for i, r := range results {
				if r.GetAllowed() != tc.allowed || r.GetRule() != "quota" || r.GetRemaining() != int64(3-tc.checks) || r.GetError() != "" {
					t.Fatalf("peek %d: %v; want allowed %v, %d of 3 left", i+1, r, tc.allowed, 3-tc.checks)
				}
				if !tc.allowed && r.GetRetryAfterNanos() <= 0 {
					t.Fatalf("peek %d at the limit: %v; want a retry", i+1, r)
				}
			}
			if got := counts(t, reg, "allot_agent_decisions_total"); got["admitted"] != float64(tc.checks) || got["denied"] != 0 {
				t.Errorf("decisions %v; want the %d checks admitted, no peek", got, tc.checks)
			}
			for i := tc.checks; i < 3; i++ {
				if r, err := c.Check(ctx, &allotpb.CheckRequest{Tenant: "acme", Cost: proto.Int64(1)}); err != nil || !r.GetAllowed() || r.GetRemaining() != int64(2-i) {
					t.Fatalf("check %d after the peeks: %v %v", i+1, r, err)
				}
			}
			if r, err := c.Check(ctx, &allotpb.CheckRequest{Tenant: "acme"}); err != nil || r.GetAllowed() {
				t.Errorf("a fourth check: %v %v; want refused", r, err)
			}
		})
	}
}

// TestRequestToProtoPeek: a peek goes on the wire as an explicit 0 and
// comes back a peek; a cost of 0 goes as none and comes back 1.
func TestRequestToProtoPeek(t *testing.T) {
	a, _ := peekAgent(t)
	c := grpcSidecar(t, a)
	for _, tc := range []struct {
		req     agent.Request
		cost    *int64
		charged bool
	}{
		{agent.Request{Tenant: "acme"}, nil, true},
		{agent.Request{Tenant: "acme", Cost: 2}, proto.Int64(2), true},
		{agent.Request{Tenant: "acme", Peek: true}, proto.Int64(0), false},
		{agent.Request{Tenant: "acme", Peek: true, Cost: 2}, proto.Int64(0), false},
	} {
		var out allotpb.CheckRequest
		sidecar.RequestToProto(tc.req, &out)
		if (out.Cost == nil) != (tc.cost == nil) || out.Cost != nil && *out.Cost != *tc.cost {
			t.Errorf("%+v: cost %v on the wire", tc.req, out.Cost)
		}
		before, err := c.Check(context.Background(), &allotpb.CheckRequest{Tenant: "acme", Cost: proto.Int64(0)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Check(context.Background(), &out); err != nil {
			t.Fatal(err)
		}
		after, _ := c.Check(context.Background(), &allotpb.CheckRequest{Tenant: "acme", Cost: proto.Int64(0)})
		if spent := before.GetRemaining() - after.GetRemaining(); (spent > 0) != tc.charged {
			t.Errorf("%+v spent %d", tc.req, spent)
		}
	}
}
