package envoy_test

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/envoy"
	"github.com/allot-io/allot/agent/forwardauth"
	"github.com/allot-io/allot/rules"
)

// TestExtAuthz: Envoy's ext_authz Check is decided from the request's
// headers, its path and its source as /v1/authz decides forward-auth: 200
// with the RateLimit headers, 429 with Retry-After and the JSON refusal,
// 400 (uncounted) for a header it cannot read.
func TestExtAuthz(t *testing.T) {
	rs, err := rules.Parse("rules.yaml", []byte(`rules:
  - {name: items, scope: tenant, match: {routes: [/v1/items]}, algorithm: fixed_window, limit: 2, period: 1m, intent: quota}
  - {name: per-ip, scope: ip, algorithm: fixed_window, limit: 100, period: 1m, intent: abuse}
`))
	if err != nil {
		t.Fatal(err)
	}
	conn, _, a := start(t, rs, func(g *grpc.Server, a *agent.Agent) {
		envoy.NewAuthorizationServer(a, forwardauth.Config{}).Register(g)
	})
	client := authv3.NewAuthorizationClient(conn)
	check := func(headers map[string]string) *authv3.CheckResponse {
		t.Helper()
		resp, err := client.Check(context.Background(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
				SocketAddress: &corev3.SocketAddress{Address: "192.0.2.7", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 50000}}}}},
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Method: "GET", Path: "/v1/items?page=2", Headers: headers}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	headerOf := func(hs []*corev3.HeaderValueOption, name string) string {
		for _, h := range hs {
			if h.GetHeader().GetKey() == name {
				return h.GetHeader().GetValue()
			}
		}
		return ""
	}
	if resp := check(map[string]string{"x-priority": "urgent"}); resp.GetStatus().GetCode() != int32(codes.InvalidArgument) || resp.GetDeniedResponse().GetStatus().GetCode() != 400 {
		t.Fatalf("an unknown priority: %v", resp)
	}
	for i := range 2 {
		resp := check(map[string]string{"x-tenant": "acme"})
		ok := resp.GetOkResponse()
		if resp.GetStatus().GetCode() != int32(codes.OK) || ok == nil {
			t.Fatalf("check %d: %v", i+1, resp)
		}
		if got := headerOf(ok.GetResponseHeadersToAdd(), "Ratelimit-Remaining"); got != "1" && got != "0" {
			t.Fatalf("check %d: RateLimit-Remaining %q", i+1, got)
		}
	}
	resp := check(map[string]string{"x-tenant": "acme"})
	den := resp.GetDeniedResponse()
	if resp.GetStatus().GetCode() != int32(codes.ResourceExhausted) || den.GetStatus().GetCode() != 429 {
		t.Fatalf("the third check: %v", resp)
	}
	if headerOf(den.GetHeaders(), "Retry-After") != "60" || den.GetBody() != `{"error":"rate_limited","scope":"tenant","rule":"items","retry_after_seconds":60}`+"\n" {
		t.Fatalf("refusal headers %v body %q", den.GetHeaders(), den.GetBody())
	}
	if resp := check(map[string]string{"x-tenant": "other"}); resp.GetOkResponse() == nil {
		t.Fatalf("another tenant: %v", resp)
	}
	// The source address keyed per-ip: three admitted and this one; the
	// refusal was given back, and the unreadable one never counted.
	d := a.Check(agent.Request{IP: "192.0.2.7"})
	if d.Rule != "per-ip" || d.Remaining != 96 {
		t.Fatalf("per-ip after the checks: %+v; want 96 remaining", d)
	}
}
