package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/allot-io/allot/coordinator/internal/authz"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// What a gRPC call may cost before it is authenticated and decoded
// (docs/security.md#what-a-caller-can-cost). gRPC reads a call's
// message, up to the server's one receive limit, and decodes it before
// any interceptor runs. So, in this order:
//
//   - the tap (tapCall) authenticates and authorizes each call as its
//     stream is created, from its headers and its TLS connection, before
//     a byte of its message is read: a caller without the method's role
//     costs a HEADERS frame;
//   - the methods open to everyone (health checks) are bounded in
//     number in flight and in time to send their request;
//   - each method takes messages up to its own size (methodLimits): a
//     larger one is refused with RESOURCE_EXHAUSTED after it is read and
//     before it is decoded (limitedRegistrar, limitCodec);
//   - a connection holds at most MaxConcurrentStreams calls at once.
const (
	// maxSmallMessage bounds one message of every method not named in
	// methodLimits: reads, and admin calls that name a thing or two.
	maxSmallMessage = 64 << 10
	// maxBulkMessage bounds an admin call that carries many things at
	// once: a rule set, 10,000 overrides (as PUT /v1/overrides).
	maxBulkMessage = maxOverridesBody
	// maxRestoreChunk bounds one chunk of a restore (RestoreFrom sends
	// backupChunk bytes each).
	maxRestoreChunk = 4 * backupChunk
	// maxHeaderList bounds a call's headers (gRPC's default is 16 MiB,
	// going down to 8 KiB): a token, trace context and the forwarding
	// member's naming of the caller fit many times over.
	maxHeaderList = 16 << 10
	// maxOpenStreams bounds the calls in flight, across connections, of
	// the methods open to callers without a credential, when credentials
	// are configured: each may have gRPC read one message of up to the
	// server's receive limit before its method's own limit is applied.
	maxOpenStreams = 16
	// openRequestTimeout bounds how long such a call may take to send its
	// request.
	openRequestTimeout = 10 * time.Second
	// connectionTimeout bounds a new connection's TLS handshake and
	// HTTP/2 preface; connectionIdle closes a connection without a call
	// for that long.
	connectionTimeout = 10 * time.Second
	connectionIdle    = 5 * time.Minute
)

// methodLimits are the largest messages each method takes: reports (an
// agent's, an Envoy's) are the big ones; a method not named takes
// maxSmallMessage.
func (c *Coordinator) methodLimits() map[string]int {
	return map[string]int{
		allotpb.AgentService_Report_FullMethodName:                        c.cfg.MaxReportBytes,
		rlqsv3.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName: c.cfg.MaxReportBytes,
		allotpb.RulesService_PutRules_FullMethodName:                      maxBulkMessage,
		allotpb.OverridesService_PutOverrides_FullMethodName:              maxBulkMessage,
		allotpb.OverridesService_DeleteOverrides_FullMethodName:           maxBulkMessage,
		allotpb.ClusterService_Restore_FullMethodName:                     maxRestoreChunk,
	}
}

// maxRecvMessage is the server's receive limit: the largest any method
// takes.
func (c *Coordinator) maxRecvMessage() int {
	n := maxSmallMessage
	for _, m := range c.methodLimits() {
		n = max(n, m)
	}
	return n
}

// tapCall admits or refuses a call as its stream is created, before
// anything of its message is read. With credentials configured, a call
// to a method that needs a role must prove it; a call to an open method
// takes one of maxOpenStreams places until its request has arrived, and
// has openRequestTimeout to send it.
func (c *Coordinator) tapCall(ctx context.Context, info *tap.Info) (context.Context, error) {
	a := c.authz
	if !a.Enabled() {
		return ctx, nil
	}
	if !strings.HasPrefix(info.FullMethodName, authz.OpenPrefix) {
		_, err := a.Authorize(ctx, info.FullMethodName)
		return ctx, err
	}
	if c.openCalls.Add(1) > maxOpenStreams {
		c.openCalls.Add(-1)
		c.metrics.openCallsRefused.Inc()
		return ctx, status.Errorf(codes.ResourceExhausted, "too many calls without a credential in flight (at most %d); retry shortly", maxOpenStreams)
	}
	wait := openRequestTimeout
	if h := c.cfg.hooks; h != nil && h.openRequestTimeout > 0 {
		wait = h.openRequestTimeout
	}
	ctx, cancel := context.WithCancelCause(ctx)
	oc := &openCall{}
	oc.timer = time.AfterFunc(wait, func() {
		cancel(status.Errorf(codes.DeadlineExceeded, "the request did not arrive within %v", wait))
	})
	oc.release = sync.OnceFunc(func() {
		oc.timer.Stop()
		c.openCalls.Add(-1)
	})
	context.AfterFunc(ctx, oc.release) // the call ended, whatever its end
	return context.WithValue(ctx, openCallKey{}, oc), nil
}

// openCall is a call to an open method holding one of the places.
type openCall struct {
	timer   *time.Timer
	release func()
}

type openCallKey struct{}

// requestArrived gives an open call's place back once its request has
// been read: a health Watch then streams for as long as it likes.
func requestArrived(ctx context.Context) {
	if oc, ok := ctx.Value(openCallKey{}).(*openCall); ok {
		oc.release()
	}
}

// limitedRegistrar registers services with each method's handlers
// wrapped to refuse a message larger than the method takes
// (methodLimits), read but not decoded.
type limitedRegistrar struct {
	*grpc.Server
	limits map[string]int
}

func (r limitedRegistrar) RegisterService(sd *grpc.ServiceDesc, impl any) {
	d := *sd
	d.Methods = slices.Clone(sd.Methods)
	for i := range d.Methods {
		d.Methods[i].Handler = limitUnary(d.Methods[i].Handler, r.limit(sd.ServiceName, d.Methods[i].MethodName))
	}
	d.Streams = slices.Clone(sd.Streams)
	for i := range d.Streams {
		d.Streams[i].Handler = limitStream(d.Streams[i].Handler, r.limit(sd.ServiceName, d.Streams[i].StreamName))
	}
	r.Server.RegisterService(&d, impl)
}

func (r limitedRegistrar) limit(service, method string) int {
	if n, ok := r.limits["/"+service+"/"+method]; ok {
		return n
	}
	return maxSmallMessage
}

// limitedMessage is what a wrapped handler has gRPC decode: the
// method's message, unless its encoding is larger than max, in which
// case limitCodec only notes its size.
type limitedMessage struct {
	msg  any
	max  int
	size int // set when larger than max, and then not decoded
}

func (m *limitedMessage) err() error {
	if m.size == 0 {
		return nil
	}
	// gRPC's own words for its receive limit, which agents act on by
	// sending smaller reports.
	return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d) for this method", m.size, m.max)
}

func limitUnary(h grpc.MethodHandler, max int) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		return h(srv, ctx, func(v any) error {
			m := &limitedMessage{msg: v, max: max}
			if err := dec(m); err != nil {
				return err
			}
			requestArrived(ctx)
			return m.err()
		}, interceptor)
	}
}

func limitStream(h grpc.StreamHandler, max int) grpc.StreamHandler {
	return func(srv any, ss grpc.ServerStream) error {
		return h(srv, &limitedStream{ServerStream: ss, max: max})
	}
}

type limitedStream struct {
	grpc.ServerStream
	max int
}

func (s *limitedStream) RecvMsg(v any) error {
	m := &limitedMessage{msg: v, max: s.max}
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	requestArrived(s.Context())
	return m.err()
}

// limitCodec is gRPC's protobuf codec, which does not decode a
// limitedMessage larger than its bound.
type limitCodec struct{ encoding.CodecV2 }

func newLimitCodec() limitCodec { return limitCodec{encoding.GetCodecV2(protocodec.Name)} }

func (c limitCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*limitedMessage); ok {
		if n := data.Len(); n > m.max {
			m.size = n
			return nil
		}
		v = m.msg
	}
	if err := c.CodecV2.Unmarshal(data, v); err != nil {
		return fmt.Errorf("coordinator: decoding %T: %w", v, err)
	}
	return nil
}
