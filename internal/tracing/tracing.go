// Package tracing carries OpenTelemetry trace context through Allot's
// servers and clients: a server span for each gRPC call and HTTP request,
// its parent read from the W3C traceparent that arrived with it, and the
// context of the span in hand written into what leaves.
//
// It uses the OpenTelemetry API only. The SDK and the OTLP exporter are in
// tracing/exporter, which only the allot command links: a gateway that
// embeds the agent passes its own TracerProvider, or none, and pays for
// no exporter.
//
// Every function here takes a trace.Tracer that may be nil, which is
// tracing off: nothing is started and nothing is allocated, so that a
// server's hot path pays one nil check.
package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// Attribute keys Allot's spans share.
const (
	Tenant   = attribute.Key("allot.tenant")
	Allowed  = attribute.Key("allot.allowed")
	Rule     = attribute.Key("allot.rule")
	Cost     = attribute.Key("allot.cost")
	Node     = attribute.Key("allot.node")
	Region   = attribute.Key("allot.region")
	Command  = attribute.Key("allot.raft.command")
	Fallback = attribute.Key("allot.fallback")
)

// w3c is the W3C Trace Context propagator: traceparent and tracestate.
// It is a stateless value, not a registered global.
var w3c propagation.TraceContext

// Tracer is the tracer Allot's packages start spans with from a provider,
// or nil (tracing off) for a nil provider.
func Tracer(tp trace.TracerProvider, name string) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(name)
}

// metadataCarrier reads and writes trace context in gRPC metadata.
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// ExtractGRPC returns ctx with the remote span context the incoming gRPC
// metadata carries, if any, as the parent of spans started from it.
func ExtractGRPC(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return w3c.Extract(ctx, metadataCarrier(md))
}

// InjectGRPC returns ctx with the span context in ctx written into its
// outgoing gRPC metadata, so that the server's span is a child of it. A
// ctx without a valid span context is returned as it is.
func InjectGRPC(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	md, ok := metadata.FromOutgoingContext(ctx)
	if ok {
		md = md.Copy()
	} else {
		md = metadata.MD{}
	}
	w3c.Inject(ctx, metadataCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}

// ExtractHTTP returns ctx with the remote span context of a request's
// traceparent header, if any.
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	return w3c.Extract(ctx, propagation.HeaderCarrier(h))
}

// Route starts the server spans of one HTTP route. Its options are built
// once, and attributes are set only on a span that records: a request
// that is not sampled allocates what the SDK must (its span and its
// context) and no more.
type Route struct {
	route, post string
	opts        []trace.SpanStartOption
}

// NewRoute returns the spans of route ("/v1/check").
func NewRoute(route string) *Route {
	return &Route{route: route, post: http.MethodPost + " " + route, opts: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}}
}

// Start starts the server span of a request, a child of the traceparent
// it came with, named "METHOD route". tr must not be nil.
func (rt *Route) Start(tr trace.Tracer, r *http.Request) (context.Context, trace.Span) {
	name := rt.post
	if r.Method != http.MethodPost {
		name = r.Method + " " + rt.route
	}
	ctx, span := tr.Start(ExtractHTTP(r.Context(), r.Header), name, rt.opts...)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", rt.route))
	}
	return ctx, span
}

// StartHTTP is NewRoute(route).Start(tr, r), for a route served rarely.
func StartHTTP(tr trace.Tracer, r *http.Request, route string) (context.Context, trace.Span) {
	return NewRoute(route).Start(tr, r)
}

// EndHTTP records an HTTP answer's status on its server span and ends it:
// a 5xx is an error of the server's; a 4xx is the client's, and is not.
func EndHTTP(span trace.Span, code int) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", code))
		if code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(code))
		}
	}
	span.End()
}

// Fail marks a span failed with err, when err is not nil.
func Fail(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
