package envoy_test

import (
	"context"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/envoy"
	"github.com/allot-io/allot/rules"
)

// FuzzShouldRateLimit: whatever a client sends, the server answers OK,
// OVER_LIMIT or INVALID_ARGUMENT, with one status per descriptor, and
// never panics.
//
//	go test -fuzz FuzzShouldRateLimit -fuzztime 60s ./agent/envoy
func FuzzShouldRateLimit(f *testing.F) {
	rs, err := rules.Parse("rules.yaml", []byte(readmeRules))
	if err != nil {
		f.Fatal(err)
	}
	a, err := agent.New(agent.Config{Rules: rs})
	if err != nil {
		f.Fatal(err)
	}
	defer a.Close(context.Background())
	s := envoy.NewRateLimitServer(a, envoy.Options{Headers: true})
	// The last three are the first descriptor's limit (none when unit is
	// negative): requests per unit, and its unit_multiplier.
	f.Add("paths", "path=/foo/bar;path=/x", uint32(1), uint64(0), false, uint32(0), int32(-1), uint32(0))
	f.Add("messaging", "message_type=marketing,to_number=1", uint32(0), uint64(7), false, uint32(0), int32(-1), uint32(0))
	f.Add("edge_proxy_per_ip", "remote_address=10.0.0.1", uint32(4294967295), uint64(1<<40), true, uint32(0), int32(-1), uint32(0))
	f.Add("", "", uint32(0), uint64(0), false, uint32(0), int32(-1), uint32(0))
	f.Add("edge_proxy_per_ip", "remote_address=10.0.0.1", uint32(1), uint64(0), false, uint32(20), int32(typev3.RateLimitUnit_MINUTE), uint32(0))
	f.Add("edge_proxy_per_ip", "remote_address=10.0.0.2", uint32(1), uint64(0), false, uint32(0), int32(typev3.RateLimitUnit_SECOND), uint32(0))
	f.Add("edge_proxy_per_ip", "remote_address=10.0.0.3", uint32(0), uint64(0), false, uint32(4294967295), int32(typev3.RateLimitUnit_YEAR), uint32(4294967295))
	f.Add("paths", "path=/x", uint32(1), uint64(0), false, uint32(5), int32(typev3.RateLimitUnit_UNKNOWN), uint32(2))
	f.Add("paths", "path=/x", uint32(1), uint64(0), false, uint32(5), int32(99), uint32(0))
	f.Fuzz(func(t *testing.T, domain, spec string, hits uint32, own uint64, negative bool, limit uint32, unit int32, multiplier uint32) {
		req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
		for i, d := range strings.Split(spec, ";") {
			desc := &commonv3.RateLimitDescriptor{IsNegativeHits: negative && i == 0}
			if i == 0 && unit >= 0 {
				desc.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: limit, Unit: typev3.RateLimitUnit(unit)}
				if multiplier > 0 {
					desc.Limit.UnitMultiplier = wrapperspb.UInt32(multiplier)
				}
			}
			for _, e := range strings.Split(d, ",") {
				k, v, _ := strings.Cut(e, "=")
				desc.Entries = append(desc.Entries, &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
			}
			if own > 0 && i == 1 {
				desc.HitsAddend = wrapperspb.UInt64(own)
			}
			req.Descriptors = append(req.Descriptors, desc)
		}
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%v", err)
			}
			return
		}
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
		over := false
		for _, st := range resp.GetStatuses() {
			over = over || st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if over != (resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT) {
			t.Fatalf("overall %v with statuses %v", resp.GetOverallCode(), resp.GetStatuses())
		}
	})
}
