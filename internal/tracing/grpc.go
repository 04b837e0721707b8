package tracing

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ServerOptions are the options that give a gRPC server a server span
// for every call, unary and streaming, each a child of the traceparent
// the call's metadata carries. Put them before the server's other
// interceptors, so that a call they refuse has its span too. nil for a
// nil tracer.
func ServerOptions(tr trace.Tracer) []grpc.ServerOption {
	if tr == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(tr)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(tr)),
	}
}

// DialOptions are the options that give a gRPC client a client span for
// every call, its context injected into the call's metadata. nil for a
// nil tracer.
func DialOptions(tr trace.Tracer) []grpc.DialOption {
	if tr == nil {
		return nil
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(UnaryClientInterceptor(tr)),
		grpc.WithChainStreamInterceptor(StreamClientInterceptor(tr)),
	}
}

// rpcAttributes are the semantic conventions' attributes of a method
// ("/allot.v1.RulesService/PutRules"); the span's name is the method
// without its leading slash.
func rpcAttributes(fullMethod string) (name string, attrs []attribute.KeyValue) {
	name = strings.TrimPrefix(fullMethod, "/")
	service, method, _ := strings.Cut(name, "/")
	return name, []attribute.KeyValue{
		attribute.String("rpc.system", "grpc"),
		attribute.String("rpc.service", service),
		attribute.String("rpc.method", method),
	}
}

// endRPC records a call's status code on its span and ends it. On a
// server only the codes that are the server's fault are errors (as the
// semantic conventions have it); on a client every code but OK is.
func endRPC(span trace.Span, err error, server bool) {
	st := status.Convert(err)
	span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st.Code())))
	if st.Code() != codes.OK && (!server || serverFault(st.Code())) {
		span.SetStatus(otelcodes.Error, st.Message())
	}
	span.End()
}

func serverFault(c codes.Code) bool {
	switch c {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// UnaryServerInterceptor starts a server span for each unary call.
func UnaryServerInterceptor(tr trace.Tracer) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		name, attrs := rpcAttributes(info.FullMethod)
		ctx, span := tr.Start(ExtractGRPC(ctx), name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		resp, err := handler(ctx, req)
		endRPC(span, err, true)
		return resp, err
	}
}

// StreamServerInterceptor starts a server span for each stream, from
// its start to the handler's return.
func StreamServerInterceptor(tr trace.Tracer) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		name, attrs := rpcAttributes(info.FullMethod)
		ctx, span := tr.Start(ExtractGRPC(ss.Context()), name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		err := handler(srv, &serverStream{ServerStream: ss, ctx: ctx})
		endRPC(span, err, true)
		return err
	}
}

// serverStream is a stream whose context holds its span.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }

// UnaryClientInterceptor starts a client span for each unary call and
// injects its context into the call's metadata.
func UnaryClientInterceptor(tr trace.Tracer) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		name, attrs := rpcAttributes(method)
		attrs = append(attrs, attribute.String("server.address", cc.Target()))
		ctx, span := tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		err := invoker(InjectGRPC(ctx), method, req, reply, cc, opts...)
		endRPC(span, err, false)
		return err
	}
}

// StreamClientInterceptor starts a client span for each stream, ended
// when the stream ends: a receive fails (io.EOF is its end, not an
// error), or the call's context is done.
func StreamClientInterceptor(tr trace.Tracer) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		name, attrs := rpcAttributes(method)
		attrs = append(attrs, attribute.String("server.address", cc.Target()))
		ctx, span := tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		cs, err := streamer(InjectGRPC(ctx), desc, cc, method, opts...)
		if err != nil {
			endRPC(span, err, false)
			return nil, err
		}
		s := &clientStream{ClientStream: cs}
		s.end = func(err error) { s.once.Do(func() { endRPC(span, err, false) }) }
		s.stop = context.AfterFunc(ctx, func() { s.end(ctx.Err()) })
		return s, nil
	}
}

// clientStream ends its span once, when the stream ends.
type clientStream struct {
	grpc.ClientStream
	once sync.Once
	end  func(error)
	stop func() bool
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.stop()
		if errors.Is(err, io.EOF) {
			s.end(nil)
		} else {
			s.end(err)
		}
	}
	return err
}
