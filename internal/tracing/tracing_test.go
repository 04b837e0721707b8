package tracing_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/tracing"
	"github.com/allot-io/allot/internal/tracing/exporter"
	"github.com/allot-io/allot/internal/tracing/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// provider exports to rcv, keeping every trace.
func provider(t *testing.T, rcv *tracetest.Receiver, service string, ratio float64) *exporter.Provider {
	t.Helper()
	p, err := exporter.New(context.Background(), exporter.Config{Endpoint: rcv.Addr(), Insecure: true, SampleRatio: ratio,
		Service: service, NodeID: "n1", Region: "eu-west", Version: "test", BatchTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return p
}

// TestGRPCParents: a client span's context crosses a real gRPC call, and
// the server's span is its child, in the trace the client's parent began.
func TestGRPCParents(t *testing.T) {
	rcv := tracetest.Start(t)
	client := provider(t, rcv, "client", 1).Tracer("test")
	server := provider(t, rcv, "server", 1).Tracer("test")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(tracing.ServerOptions(server)...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), append(tracing.DialOptions(client), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, root := client.Start(context.Background(), "command")
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	root.End()
	const method = "grpc.health.v1.Health/Check"
	cs := rcv.Wait(t, 10*time.Second, "client "+method, tracetest.Named("client", method))
	ss := rcv.Wait(t, 10*time.Second, "server "+method, tracetest.Named("server", method))
	rs := rcv.Wait(t, 10*time.Second, "client command", tracetest.Named("client", "command"))
	if cs.ParentID != rs.SpanID || ss.ParentID != cs.SpanID || ss.TraceID != rs.TraceID {
		t.Errorf("parents: command %v\nclient %v\nserver %v", rs, cs, ss)
	}
	if ss.Attrs["rpc.service"] != "grpc.health.v1.Health" || ss.Attrs["rpc.method"] != "Check" || ss.Attrs["rpc.grpc.status_code"] != "0" {
		t.Errorf("server span attributes: %v", ss.Attrs)
	}
	if ss.Resource["allot.node"] != "n1" || ss.Resource["allot.region"] != "eu-west" || ss.Resource["service.version"] != "test" {
		t.Errorf("resource: %v", ss.Resource)
	}
}

// TestHTTPTraceparent: a request's traceparent is the server span's
// parent.
func TestHTTPTraceparent(t *testing.T) {
	rcv := tracetest.Start(t)
	tr := provider(t, rcv, "server", 0).Tracer("test") // a sampled parent is kept at ratio 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, span := tracing.StartHTTP(tr, r, "/v1/x")
		w.WriteHeader(http.StatusTeapot)
		tracing.EndHTTP(span, http.StatusTeapot)
	}))
	defer srv.Close()
	for _, tp := range []string{
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", // sampled: kept
		"00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-00", // not sampled: dropped
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("traceparent", tp)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	s := rcv.Wait(t, 10*time.Second, "GET /v1/x", tracetest.Named("server", "GET /v1/x"))
	if s.TraceID != "0af7651916cd43dd8448eb211c80319c" || s.ParentID != "b7ad6b7169203331" || s.Kind != 2 /* server */ {
		t.Errorf("span %v: want trace 0af7…, parent b7ad…, kind server", s)
	}
	if s.Attrs["http.response.status_code"] != "418" {
		t.Errorf("attributes %v", s.Attrs)
	}
	time.Sleep(200 * time.Millisecond) // a batch or two more
	if n := len(rcv.Spans()); n != 1 {
		t.Errorf("%d spans exported, want the sampled request's alone: %v", n, rcv.Spans())
	}
}

// TestOffIsNothing: a nil tracer gives no options and starts nothing.
func TestOffIsNothing(t *testing.T) {
	if tracing.ServerOptions(nil) != nil || tracing.DialOptions(nil) != nil || tracing.Tracer(nil, "x") != nil {
		t.Error("tracing off still gives options or a tracer")
	}
	ctx := context.Background()
	if got := tracing.InjectGRPC(ctx); got != ctx {
		t.Error("InjectGRPC changed a context with no span")
	}
	var _ trace.TracerProvider = (*exporter.Provider)(nil)
	if p, err := exporter.New(ctx, exporter.Config{}); p != nil || err != nil || p.TracerProviderOrNil() != nil {
		t.Errorf("no endpoint: %v, %v", p, err)
	}
}
