package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestEnvoyServicesProcess runs `allot agent --envoy-rls-addr` as a
// process, with rules imported from an envoyproxy/ratelimit file by
// `allot rules import`, and asks it as Envoy would: its health service,
// ShouldRateLimit until a descriptor is over its limit, and ext_authz.
func TestEnvoyServicesProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an allot process")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(src, []byte(`domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unlimited: true}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(dir, "rules.yaml")
	if code, _, stderr := runAllot(t, cliEnv(), "rules", "import", "--from", "envoy-ratelimit", "--out", rulesFile, src); code != 0 {
		t.Fatalf("allot rules import: exit %d\n%s", code, stderr)
	}
	addrs := loopbackAddrs(t, 2)
	p := startDaemon(t, "sidecar", cliEnv(), allotBinary(t), "agent", "--rules", rulesFile, "--node-id", "gw-1",
		"--http-addr", addrs[0], "--envoy-rls-addr", addrs[1], "--envoy-rls-headers")
	conn, err := grpc.NewClient(addrs[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	eventually(t, "the rate limit service", []*process{p}, func() (bool, string) {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return false, err.Error()
		}
		return resp.GetStatus() == healthpb.HealthCheckResponse_SERVING, resp.GetStatus().String()
	})
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(addr string) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := range 3 {
		if resp := ask("192.0.2.1"); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v", i+1, resp)
		}
	}
	resp := ask("192.0.2.1")
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.GetResponseHeadersToAdd()) == 0 {
		t.Fatalf("the fourth request: %v; want OVER_LIMIT with headers", resp)
	}
	for range 10 {
		if resp := ask("10.0.0.1"); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("the unlimited address: %v", resp)
		}
	}
	az, err := authv3.NewAuthorizationClient(conn).Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: "/", Headers: map[string]string{"x-tenant": "acme"}}}}})
	if err != nil || az.GetOkResponse() == nil {
		t.Fatalf("ext_authz with no rule for it: %v %v; want OK", az, err)
	}
}
