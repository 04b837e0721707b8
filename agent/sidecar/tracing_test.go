package sidecar

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/agenttest"
	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/tracing"
	"github.com/allot-io/allot/internal/tracing/exporter"
	"github.com/allot-io/allot/internal/tracing/tracetest"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// tracedAgent is a standalone agent with one token-bucket rule per
// tenant, limit a second, tracing to rcv at the given sample ratio (rcv
// nil: tracing off).
func tracedAgent(tb testing.TB, rcv *tracetest.Receiver, ratio float64, limit int64) *agent.Agent {
	tb.Helper()
	rule := agenttest.Rule("tenant", rules.Tenant, algo.TokenBucket, limit, time.Second, lease.Capacity)
	rule.Burst = limit
	cfg := agent.Config{Rules: []rules.Rule{rule}}
	if rcv != nil {
		p, err := exporter.New(context.Background(), exporter.Config{Endpoint: rcv.Addr(), Insecure: true, SampleRatio: ratio,
			Service: "allot-agent", NodeID: "gw-1", BatchTimeout: 50 * time.Millisecond})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = p.Shutdown(ctx)
		})
		cfg.TracerProvider = p
	}
	a, err := agent.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close(context.Background()) })
	return a
}

const (
	parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + parentTrace + "-" + parentSpan + "-01"
)

// TestCheckSpan: a check sent to the real handler with a sampled
// traceparent has a server span, the child of that span, naming the
// tenant, the cost, the decision and the rule; with the sample ratio at 0
// the caller's sampled flag alone keeps it.
func TestCheckSpan(t *testing.T) {
	rcv := tracetest.Start(t)
	a := tracedAgent(t, rcv, 0, 1)
	srv := httptest.NewServer(CheckHandler(a))
	defer srv.Close()
	for range 2 { // admitted, then refused
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/check", strings.NewReader(`{"tenant":"acme","cost":1}`))
		req.Header.Set("traceparent", traceparent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, want := range []struct{ allowed, code string }{{"true", "200"}, {"false", "429"}} {
		s := rcv.Wait(t, 10*time.Second, "POST /v1/check answered "+want.code, func(s tracetest.Span) bool {
			return s.Name == "POST /v1/check" && s.Attrs["http.response.status_code"] == want.code
		})
		if s.Service != "allot-agent" || s.TraceID != parentTrace || s.ParentID != parentSpan {
			t.Errorf("span %v: want the child of %s in trace %s", s, parentSpan, parentTrace)
		}
		for k, v := range map[string]string{"allot.tenant": "acme", "allot.allowed": want.allowed, "allot.rule": "tenant", "allot.cost": "1", "http.route": "/v1/check"} {
			if s.Attrs[k] != v {
				t.Errorf("%s: %s = %q, want %q", s.Name, k, s.Attrs[k], v)
			}
		}
	}
}

// TestGRPCCheckSpan: the gRPC Check, served with the tracing
// interceptors, has a server span, the child of the traceparent in the
// call's metadata, with the decision's attributes.
func TestGRPCCheckSpan(t *testing.T) {
	rcv := tracetest.Start(t)
	a := tracedAgent(t, rcv, 0, 10)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(tracing.ServerOptions(a.Tracer())...)
	NewSidecarServer(a).Register(g)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
	if _, err := allotpb.NewSidecarServiceClient(cc).Check(ctx, &allotpb.CheckRequest{Tenant: "acme", Cost: proto.Int64(3)}); err != nil {
		t.Fatal(err)
	}
	s := rcv.Wait(t, 10*time.Second, "Check", tracetest.Named("allot-agent", "allot.v1.SidecarService/Check"))
	if s.TraceID != parentTrace || s.ParentID != parentSpan {
		t.Errorf("span %v: want the child of %s in trace %s", s, parentSpan, parentTrace)
	}
	for k, v := range map[string]string{"allot.tenant": "acme", "allot.allowed": "true", "allot.rule": "tenant", "allot.cost": "3", "rpc.grpc.status_code": "0"} {
		if s.Attrs[k] != v {
			t.Errorf("%s = %q, want %q", k, s.Attrs[k], v)
		}
	}
}

// TestCheckHandlerAllocsTracingOff: with tracing off the handler
// allocates what the untraced path does, nothing for the span it does
// not start; with tracing on and the check not sampled, the SDK's span
// and context and nothing of the handler's.
func TestCheckHandlerAllocsTracingOff(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	a := tracedAgent(t, nil, 0, 100_000_000)
	h := CheckHandler(a)
	body := strings.NewReader(typicalCheck)
	req, err := http.NewRequest(http.MethodPost, "/v1/check", io.NopCloser(body))
	if err != nil {
		t.Fatal(err)
	}
	w := &benchWriter{h: make(http.Header)}
	n := testing.AllocsPerRun(1000, func() {
		body.Reset(typicalCheck)
		h.ServeHTTP(w, req)
	})
	if w.code != http.StatusOK {
		t.Fatalf("answered %d", w.code)
	}
	// The same body through the handler's parts, untraced: whatever the
	// headers cost, tracing off must add nothing to it.
	base := testing.AllocsPerRun(1000, func() {
		body.Reset(typicalCheck)
		serveCheck(a, w, req, nil, false)
	})
	if n > base {
		t.Errorf("CheckHandler with tracing off: %v allocations, the untraced path %v", n, base)
	}
	rcv := tracetest.Start(t)
	h = CheckHandler(tracedAgent(t, rcv, 0, 100_000_000))
	unsampled := testing.AllocsPerRun(1000, func() {
		body.Reset(typicalCheck)
		h.ServeHTTP(w, req)
	})
	if unsampled > base+4 {
		t.Errorf("CheckHandler, traced and not sampled: %v allocations, want at most %v", unsampled, base+4)
	}
}

// BenchmarkCheckHandlerTracing is one POST /v1/check through the real
// handler, admitted, with tracing off, on at sample ratio 0 (a span
// started and never sampled, as for most checks at the default ratio),
// and on at ratio 1 (every check recorded and exported to a loopback
// OTLP receiver). Run:
//
//	go test -run '^$' -bench CheckHandlerTracing -benchmem ./agent/sidecar
func BenchmarkCheckHandlerTracing(b *testing.B) {
	rcv := tracetest.Start(b)
	for _, c := range []struct {
		name  string
		rcv   *tracetest.Receiver
		ratio float64
	}{{"off", nil, 0}, {"unsampled", rcv, 0}, {"sampled", rcv, 1}} {
		a := tracedAgent(b, c.rcv, c.ratio, 100_000_000)
		h := CheckHandler(a)
		b.Run(c.name, func(b *testing.B) {
			body := strings.NewReader(typicalCheck)
			req, err := http.NewRequest(http.MethodPost, "/v1/check", io.NopCloser(body))
			if err != nil {
				b.Fatal(err)
			}
			w := &benchWriter{h: make(http.Header)}
			b.ReportAllocs()
			for b.Loop() {
				body.Reset(typicalCheck)
				h.ServeHTTP(w, req)
			}
			if w.code != http.StatusOK {
				b.Fatalf("answered %d", w.code)
			}
		})
	}
}
