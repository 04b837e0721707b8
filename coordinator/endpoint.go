package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/allot-io/allot/coordinator/internal/shardgroup"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/clusterclient"
	"github.com/allot-io/allot/internal/listenerr"
	"github.com/allot-io/allot/internal/shard"
	"github.com/allot-io/allot/internal/tracing"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// LeaderTrailer is the gRPC trailer in which a follower names the leader's
// address when it refuses an agent's report.
const LeaderTrailer = clusterclient.LeaderTrailer

var errBadRequest = errors.New("coordinator: bad request")

// startGRPC serves every gRPC service on the gRPC listener.
func (c *Coordinator) startGRPC() error {
	// The tracing interceptors come first, so that a call refused by
	// authorization has its span too.
	// What a call may cost before it is authenticated and decoded is
	// bounded in endpoint_limits.go: the tap, the receive and header limits,
	// the streams per connection, and each method's limit.
	opts := append(tracing.ServerOptions(c.tracer),
		grpc.InTapHandle(c.tapCall),
		grpc.MaxRecvMsgSize(c.maxRecvMessage()),
		grpc.ForceServerCodecV2(newLimitCodec()),
		grpc.MaxHeaderListSize(maxHeaderList),
		grpc.MaxConcurrentStreams(uint32(c.cfg.MaxConcurrentStreams)),
		grpc.ConnectionTimeout(connectionTimeout),
		grpc.ChainUnaryInterceptor(releasingRequest(c.metrics.grpc.UnaryServerInterceptor()), markHandled, c.authz.Unary),
		grpc.ChainStreamInterceptor(c.metrics.grpc.StreamServerInterceptor(), c.authz.Stream),
		grpc.StatsHandler(&oversizeCounter{reports: c.metrics.reports}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: c.cfg.MaxConnectionAge, MaxConnectionAgeGrace: time.Minute, MaxConnectionIdle: connectionIdle}),
	)
	if c.tls != nil {
		// Client certificates are verified when given; callers without
		// one authenticate by token, and each refusal is counted by
		// method rather than lost in a failed handshake.
		opts = append(opts, grpc.Creds(credentials.NewTLS(c.tls.ServerConfig(false))))
	}
	c.grpc = grpc.NewServer(opts...)
	reg := limitedRegistrar{Server: c.grpc, limits: c.methodLimits()}
	allotpb.RegisterAgentServiceServer(reg, &agentServer{c: c})
	allotpb.RegisterRulesServiceServer(reg, &rulesServer{c: c})
	allotpb.RegisterOverridesServiceServer(reg, &overridesServer{c: c})
	allotpb.RegisterResetsServiceServer(reg, &resetsServer{c: c})
	allotpb.RegisterClusterServiceServer(reg, &clusterServer{c: c})
	allotpb.RegisterUsageServiceServer(reg, &usageServer{c: c})
	allotpb.RegisterAuditServiceServer(reg, &auditServer{c: c})
	allotpb.RegisterBalanceServiceServer(reg, &balanceServer{c: c})
	allotpb.RegisterShardServiceServer(reg, c.groups.Server())
	rlqsv3.RegisterRateLimitQuotaServiceServer(reg, c.newRLQS())
	c.health = health.NewServer()
	healthpb.RegisterHealthServer(reg, c.health)
	reflection.Register(reg)
	c.metrics.grpc.InitializeMetrics(c.grpc) // every method's series at 0
	lis, err := net.Listen("tcp", c.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("coordinator: grpc listener: %w", listenerr.Explain("grpc-addr", c.cfg.GRPCAddr, err))
	}
	c.grpcLis = lis
	c.peers = newPeers(c.grpcDialOptions())
	go func() {
		if err := c.grpc.Serve(c.grpcLis); err != nil && !c.closed.Load() {
			c.log.Error("grpc server stopped", "error", err)
		}
	}()
	return nil
}

// grpcDialOptions are how this member dials other members: a call
// forwarded to the leader carries the trace context on.
func (c *Coordinator) grpcDialOptions() []grpc.DialOption {
	opts := tracing.DialOptions(c.tracer)
	if c.tls != nil {
		return append(opts, grpc.WithTransportCredentials(c.tls.ClientCredentials()))
	}
	return append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// withToken attaches a bearer token to an outgoing call.
func withToken(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// forwardToken passes the caller's authorization on to the leader.
func forwardToken(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) > 0 {
		return metadata.AppendToOutgoingContext(ctx, "authorization", v[0])
	}
	return ctx
}

// oversizeCounter counts reports refused by gRPC for exceeding
// MaxReportBytes; they never reach a handler.
type oversizeCounter struct{ reports *prometheus.CounterVec }

// rpcTag follows a call from the stats handler to the interceptors.
type rpcTag struct {
	method  string
	handled atomic.Bool // an interceptor saw the call: its message was read
}

type rpcTagKey struct{}

func (o *oversizeCounter) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, rpcTagKey{}, &rpcTag{method: info.FullMethodName})
}
func (o *oversizeCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	tag, _ := ctx.Value(rpcTagKey{}).(*rpcTag)
	if !ok || end.Error == nil || tag == nil || tag.method != allotpb.AgentService_Report_FullMethodName || tag.handled.Load() {
		return
	}
	if status.Code(end.Error) == codes.ResourceExhausted {
		o.reports.WithLabelValues("too_large").Inc()
	}
}

// releasingRequest runs an interceptor that does not need the request
// (gRPC's server metrics) without letting it hold the request: the
// metrics interceptor keeps it, in its call's metadata, until the call
// returns, and a report waiting for its round kept its whole decoded
// demand reachable through it (issue 41: decoded reports were two thirds
// of the leader's heap at 100 gateways × 2,000 tenants, although the
// allocator keeps none of a report past its fold). The interceptor is
// given no request; the handler gets it once, from a variable it clears.
func releasingRequest(intercept grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		return intercept(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
			r := req
			req = nil
			return next(ctx, r)
		})
	}
}

// markHandled notes that a call reached the interceptors, so that its
// refusals are not taken for a message gRPC found too large.
func markHandled(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if tag, ok := ctx.Value(rpcTagKey{}).(*rpcTag); ok {
		tag.handled.Store(true)
	}
	return next(ctx, req)
}
func (o *oversizeCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (o *oversizeCounter) HandleConn(context.Context, stats.ConnStats) {}

// invalid builds an INVALID_ARGUMENT status naming the offending field.
func invalid(field, desc string) error {
	return badRequest(field+": "+desc, &errdetails.BadRequest_FieldViolation{Field: field, Description: desc})
}

// badRequest is an INVALID_ARGUMENT status with msg and a BadRequest
// detail listing every violation, the one shape every refused input
// takes.
func badRequest(msg string, vs ...*errdetails.BadRequest_FieldViolation) error {
	st := status.New(codes.InvalidArgument, msg)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: vs}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// rulesError turns rule validation errors into INVALID_ARGUMENT with one
// field violation per problem.
func rulesError(err error) error {
	var es rules.Errors
	var e *rules.Error
	switch {
	case errors.As(err, &es):
	case errors.As(err, &e):
		es = rules.Errors{e}
	default:
		return status.Error(codes.Internal, err.Error())
	}
	vs := make([]*errdetails.BadRequest_FieldViolation, len(es))
	for i, e := range es {
		field := e.Field
		if e.Rule != "" {
			field = "rules[" + e.Rule + "]." + e.Field
		}
		vs[i] = &errdetails.BadRequest_FieldViolation{Field: field, Description: e.Msg}
	}
	return badRequest(err.Error(), vs...)
}

// notLeader tells an agent where the leader is.
func (c *Coordinator) notLeader(ctx context.Context) error {
	_, addr := c.Leader()
	if addr != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(LeaderTrailer, addr))
		return status.Errorf(codes.Unavailable, "not the leader; the leader is at %s", addr)
	}
	return status.Error(codes.Unavailable, "no leader elected yet; retry shortly")
}

// grpcError maps internal errors onto gRPC codes.
func grpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotLeader):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, errBadRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unavailable, err.Error())
}

// annotate adds attributes to the span of a traced call: admin calls are
// rare, so the attributes are built even when nothing records them.
func annotate(ctx context.Context, kv ...attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(kv...)
	}
}

// onLeader runs a write on the leader: local here if this member leads,
// otherwise forward to the leader. It is the first thing a write does
// after checking its arguments' syntax: whatever depends on the
// replicated state (a rule that must exist, a set that must stay valid)
// is checked in local, on the leader, never on a follower whose replica
// may not have applied the write just before this one (Consul's
// endpoints forward first for the same reason).
//
// A member that has just won an election may not have applied every
// entry committed before its term; until it is ready to serve (lead's
// barrier done), local waits for a barrier of its own so that it too
// checks against everything committed.
func onLeader[T any](ctx context.Context, c *Coordinator, local func() (T, error), forward func(ctx context.Context, addr string) (T, error)) (T, error) {
	var zero T
	if c.raft.State() == raft.Leader {
		err := c.caughtUp(ctx)
		if err == nil {
			v, err := local()
			if !errors.Is(err, ErrNotLeader) {
				return v, err
			}
		} else if ctx.Err() != nil {
			return zero, status.FromContextError(ctx.Err()).Err()
		}
	}
	_, addr := c.Leader()
	if addr == "" || addr == c.AdvertisedGRPCAddr() {
		return zero, status.Error(codes.Unavailable, "no leader elected yet; retry shortly")
	}
	c.metrics.forwardedCalls.Inc()
	annotate(ctx, attribute.String("allot.forwarded_to", addr))
	fctx, cancel := context.WithTimeout(c.forwardCaller(ctx, forwardToken(ctx)), 15*time.Second)
	defer cancel()
	return forward(fctx, addr)
}

// caughtUp returns once this leader's replica holds every entry
// committed before its term: at once when it is ready to serve, after a
// barrier otherwise. It fails when the barrier does (leadership lost).
func (c *Coordinator) caughtUp(ctx context.Context) error {
	if c.leading.Load() {
		return nil
	}
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if timeout <= 0 {
		return ctx.Err()
	}
	if err := waitFuture(ctx, c.raft.Barrier(timeout)); err != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return nil
}

// shardMember is this member as its shard group sees it (package
// coordinator/internal/shardgroup).
type shardMember struct{ c *Coordinator }

func (m shardMember) Read(fn func(*state.State)) { m.c.fsm.Read(fn) }

func (m shardMember) Apply(t state.Command, msg proto.Message, timeout time.Duration) (any, error) {
	return m.c.apply(m.c.ctx, t, msg, timeout)
}

func (m shardMember) Leading() bool { return m.c.leading.Load() }

func (m shardMember) OnLeader(ctx context.Context, local func() (any, error), forward func(ctx context.Context, addr string) (any, error)) (any, error) {
	return onLeader(ctx, m.c, func() (any, error) {
		v, err := local()
		if errors.Is(err, shardgroup.ErrNotServing) {
			return v, ErrNotLeader
		}
		return v, err
	}, forward)
}

func (m shardMember) Answer(method string, err error) error {
	m.c.metrics.adminRequests.WithLabelValues(method, resultLabel(err)).Inc()
	return grpcError(err)
}

func (m shardMember) Conn(addr string) grpc.ClientConnInterface { return m.c.peers.conn(addr) }

func (m shardMember) AsMember(ctx context.Context) context.Context {
	return withToken(ctx, m.c.joinToken())
}

// groupID is this cluster's shard group.
func (c *Coordinator) groupID() string {
	if c.cfg.Group != "" {
		return c.cfg.Group
	}
	return shard.DefaultGroup
}

// isHome reports whether this cluster is its region's home group.
func (c *Coordinator) isHome() bool { return len(c.cfg.ShardHome) == 0 }

// notHome refuses a call only the home group answers.
func (c *Coordinator) notHome(what string) error { return c.groups.NotHome(what) }

// shardMap is the region's map as this (home) member holds it.
func (c *Coordinator) shardMap() *shard.Map { return c.groups.Map() }

func resultLabel(err error) string {
	if err == nil {
		return "ok"
	}
	return strings.ToLower(status.Code(grpcError(err)).String())
}

// peers holds client connections to other members, for forwarding.
type peers struct {
	mu    sync.Mutex
	opts  []grpc.DialOption
	conns map[string]*grpc.ClientConn
}

func newPeers(opts []grpc.DialOption) *peers {
	return &peers{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

func (p *peers) conn(addr string) *grpc.ClientConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cc := p.conns[addr]; cc != nil {
		return cc
	}
	cc, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		// NewClient fails only on a malformed target; calls on a nil
		// connection would panic, so use a client that fails each call.
		cc, _ = grpc.NewClient("passthrough:///invalid-address", p.opts...)
	}
	p.conns[addr] = cc
	return cc
}

func (p *peers) rules(addr string) allotpb.RulesServiceClient {
	return allotpb.NewRulesServiceClient(p.conn(addr))
}

func (p *peers) cluster(addr string) allotpb.ClusterServiceClient {
	return allotpb.NewClusterServiceClient(p.conn(addr))
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cc := range p.conns {
		cc.Close()
	}
	p.conns = map[string]*grpc.ClientConn{}
}
