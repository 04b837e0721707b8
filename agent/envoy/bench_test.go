package envoy_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/envoy"
	"github.com/allot-io/allot/agent/forwardauth"
	"github.com/allot-io/allot/agent/sidecar"
	"github.com/allot-io/allot/rules"
)

// benchRules give every path the same work: one token bucket per tenant
// (or per descriptor value), far from its limit, so that every check is
// admitted and spends.
const benchRules = `
rules:
  - {name: per-tenant, scope: tenant, algorithm: token_bucket, limit: 1000000000, period: 1s, intent: capacity}
  - {name: per-key, scope: descriptor, match: {domain: edge, descriptors: [{key: tenant}]}, algorithm: token_bucket, limit: 1000000000, period: 1s, intent: capacity}
`

// BenchmarkSidecarPaths times one admitted check through each way a
// gateway reaches the agent, in one run: the library's own decision, the
// Envoy rate limit service over loopback gRPC, forward-auth and
// POST /v1/check over loopback HTTP (keep-alive, one connection per
// client goroutine). "seq" runs one client and reports latency
// percentiles; "par" runs GOMAXPROCS×8 clients and reports throughput.
//
//	go test -run '^$' -bench SidecarPaths -benchtime 20000x ./agent/envoy
func BenchmarkSidecarPaths(b *testing.B) {
	rs, err := rules.Parse("bench.yaml", []byte(benchRules))
	if err != nil {
		b.Fatal(err)
	}
	a, err := agent.New(agent.Config{Rules: rs})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close(context.Background())

	mux := http.NewServeMux()
	mux.Handle("/v1/check", sidecar.CheckHandler(a))
	mux.Handle("/v1/authz", forwardauth.Handler(a, forwardauth.Config{}))
	hl, _ := net.Listen("tcp", "127.0.0.1:0")
	hs := &http.Server{Handler: mux}
	go hs.Serve(hl)
	defer hs.Close()
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	g := grpc.NewServer(grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0)))) // as allot agent serves it
	envoy.NewRateLimitServer(a, envoy.Options{}).Register(g)
	go g.Serve(gl)
	defer g.Stop()
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	httpc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	base := "http://" + hl.Addr().String()

	var n atomic.Uint64
	tenant := func() string { return "t" + string(rune('a'+n.Add(1)%16)) }
	paths := []struct {
		name string
		do   func() error
	}{
		{"library", func() error {
			d := a.CheckDescriptors("edge", []agent.Descriptor{{Entries: []agent.Entry{{Key: "tenant", Value: tenant()}}}}, 1, nil)
			if !d[0].Allowed {
				b.Error("refused")
			}
			return nil
		}},
		{"rls-grpc", func() error {
			resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
				{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant()}}}}})
			if err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				b.Error("refused")
			}
			return err
		}},
		{"authz-http", func() error {
			req, _ := http.NewRequest(http.MethodGet, base+"/v1/authz", nil)
			req.Header.Set("X-Tenant", tenant())
			return call(b, httpc, req)
		}},
		{"check-http", func() error {
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/check", bytes.NewReader([]byte(`{"tenant":"`+tenant()+`"}`)))
			return call(b, httpc, req)
		}},
	}
	for _, p := range paths {
		b.Run(p.name+"/seq", func(b *testing.B) {
			b.ReportAllocs()
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				if err := p.do(); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			q := func(f float64) float64 { return float64(lat[min(int(f*float64(len(lat))), len(lat)-1)].Microseconds()) }
			b.ReportMetric(q(0.5), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
			b.ReportMetric(q(0.999), "p999-µs")
		})
		b.Run(p.name+"/par", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := p.do(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "checks/s")
		})
	}
}

func call(b *testing.B, c *http.Client, req *http.Request) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Errorf("%s: %s", req.URL.Path, resp.Status)
	}
	return nil
}
