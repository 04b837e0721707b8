package coordinator

import (
	"context"
	"crypto/subtle"
	"errors"
	"strings"
	"time"

	"github.com/allot-io/allot/lease/rules"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// LeaderTrailer is the gRPC trailer in which a follower names the leader's
// address when it refuses an agent's report.
const LeaderTrailer = "allot-leader"

var errBadRequest = errors.New("coordinator: bad request")

// adminMethods need the admin token when one is configured.
var adminMethods = map[string]bool{
	allotpb.RulesService_PutRules_FullMethodName:   true,
	allotpb.RulesService_DeleteRule_FullMethodName: true,
	allotpb.ClusterService_Join_FullMethodName:     true,
	allotpb.ClusterService_Remove_FullMethodName:   true,
}

// authInterceptor refuses administrative writes without the admin token.
func (c *Coordinator) authInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if !adminMethods[info.FullMethod] || c.cfg.AdminToken == "" {
		return next(ctx, req)
	}
	method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
	md, _ := metadata.FromIncomingContext(ctx)
	if tokenOK(md, c.cfg.AdminToken) {
		return next(ctx, req)
	}
	c.metrics.adminRequests.WithLabelValues(method, "unauthenticated").Inc()
	return nil, status.Error(codes.Unauthenticated, "this call changes the cluster and needs the admin token: send \"authorization: Bearer <token>\"")
}

// tokenOK reports whether the metadata carries the admin token.
func tokenOK(md metadata.MD, token string) bool {
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok && subtle.ConstantTimeCompare([]byte(tok), []byte(token)) == 1 {
			return true
		}
	}
	return false
}

// withToken attaches the admin token to an outgoing call.
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

type rpcMethodKey struct{}

func (o *oversizeCounter) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, rpcMethodKey{}, info.FullMethodName)
}
func (o *oversizeCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok || end.Error == nil || ctx.Value(rpcMethodKey{}) != allotpb.AgentService_Report_FullMethodName {
		return
	}
	if status.Code(end.Error) == codes.ResourceExhausted {
		o.reports.WithLabelValues("too_large").Inc()
	}
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

// checkIdentity enforces, under mutual TLS, that an agent reports only as
// the node its certificate names.
func (c *Coordinator) checkIdentity(ctx context.Context, node string) error {
	if c.cfg.TLS.CAFile == "" {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return errIdentity
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return errIdentity
	}
	for _, name := range identities(info.State) {
		if name == node {
			return nil
		}
	}
	return errIdentity
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

// onLeader runs fn on the leader: here if this member leads, otherwise by
// forwarding to the leader through call.
func onLeader[T any](ctx context.Context, c *Coordinator, local func() (T, error), forward func(ctx context.Context, addr string) (T, error)) (T, error) {
	if c.raft.State().String() == "Leader" {
		v, err := local()
		if !errors.Is(err, ErrNotLeader) {
			return v, err
		}
	}
	var zero T
	_, addr := c.Leader()
	if addr == "" || addr == c.AdvertisedGRPCAddr() {
		return zero, status.Error(codes.Unavailable, "no leader elected yet; retry shortly")
	}
	c.metrics.forwardedCalls.Inc()
	fctx, cancel := context.WithTimeout(forwardToken(ctx), 15*time.Second)
	defer cancel()
	return forward(fctx, addr)
}
