// Package tracetest is an OTLP trace receiver for tests: a loopback gRPC
// server implementing the collector's TraceService, with the collector's
// own protobuf types, that keeps every span exported to it. Tests point a
// real exporter at it and read back what arrived, names, attributes and
// parents, as a collector would have it.
package tracetest

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is one span as it arrived, with its resource's service name.
type Span struct {
	Service  string
	Name     string
	Kind     tracepb.Span_SpanKind
	TraceID  string // hex
	SpanID   string // hex
	ParentID string // hex; empty for a root span
	Attrs    map[string]string
	Resource map[string]string
	Status   tracepb.Status_StatusCode
}

func (s Span) String() string {
	return fmt.Sprintf("%s %q trace %s span %s parent %s %v", s.Service, s.Name, s.TraceID, s.SpanID, s.ParentID, s.Attrs)
}

// Receiver is a running OTLP/gRPC trace receiver.
type Receiver struct {
	collectorpb.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []Span
	added chan struct{} // closed and replaced whenever spans arrive
}

// Start starts a receiver on a loopback port; the test's cleanup stops it.
func Start(t testing.TB) *Receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{addr: lis.Addr().String(), added: make(chan struct{})}
	g := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(g, r)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return r
}

// Addr is the receiver's host:port, for an exporter's endpoint.
func (r *Receiver) Addr() string { return r.addr }

// Export keeps the spans of one export.
func (r *Receiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, Span{
					Service: res["service.name"], Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Attrs: attrs(s.GetAttributes()),
					Resource: res, Status: s.GetStatus().GetCode(),
				})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	close(r.added)
	r.added = make(chan struct{})
	r.mu.Unlock()
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// attrs renders attributes as strings, as a test compares them.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		var s string
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			s = x.StringValue
		case *commonpb.AnyValue_IntValue:
			s = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			s = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			s = fmt.Sprint(x.DoubleValue)
		default:
			s = v.String()
		}
		out[kv.GetKey()] = s
	}
	return out
}

// Spans is every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Wait returns the first span received that match accepts, waiting for
// it up to timeout; it fails the test, listing what did arrive, if none
// comes.
func (r *Receiver) Wait(t testing.TB, timeout time.Duration, what string, match func(Span) bool) Span {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		spans, added := r.spans, r.added
		r.mu.Unlock()
		for _, s := range spans {
			if match(s) {
				return s
			}
		}
		select {
		case <-added:
		case <-deadline.C:
			var b strings.Builder
			for _, s := range spans {
				fmt.Fprintf(&b, "\n  %v", s)
			}
			t.Fatalf("no span %s within %v; received %d:%s", what, timeout, len(spans), b.String())
			return Span{}
		}
	}
}

// Named matches spans by service and name.
func Named(service, name string) func(Span) bool {
	return func(s Span) bool { return s.Service == service && s.Name == name }
}
