package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	allotpb "github.com/allot-io/allot/proto"
)

// MaxCheckBatch bounds the checks in one CheckStream batch. A larger
// batch is answered with an error and nothing in it is decided.
const MaxCheckBatch = 1024

// SidecarServer serves allot.v1.SidecarService from an agent: Check for
// one request a call, and CheckStream for gateways that pipeline, where
// one long-lived stream carries batches of checks with no per-call cost.
type SidecarServer struct {
	allotpb.UnimplementedSidecarServiceServer
	a        *agent.Agent
	draining chan struct{}
	once     sync.Once
	// tracer is the agent's, nil when tracing is off. The calls' server
	// spans are the gRPC server's (tracing.ServerOptions); the service
	// gives them the decision, and each CheckStream batch a span of its
	// own.
	tracer trace.Tracer
}

// NewSidecarServer returns the sidecar's gRPC service for a.
func NewSidecarServer(a *agent.Agent) *SidecarServer {
	return &SidecarServer{a: a, draining: make(chan struct{}), tracer: a.Tracer()}
}

// Drain ends every CheckStream once the batch it is deciding is answered,
// so that a server's GracefulStop is not held up by streams that never
// end. Batches received and not yet decided are neither decided nor
// counted: the client sees its stream end and asks again elsewhere.
func (s *SidecarServer) Drain() { s.once.Do(func() { close(s.draining) }) }

// Register adds the service to a gRPC server.
func (s *SidecarServer) Register(g *grpc.Server) { allotpb.RegisterSidecarServiceServer(g, s) }

// Check decides one request. A malformed one fails with INVALID_ARGUMENT
// and is not counted.
func (s *SidecarServer) Check(ctx context.Context, in *allotpb.CheckRequest) (*allotpb.CheckResponse, error) {
	req, err := requestFromProto(in)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	out := &allotpb.CheckResponse{}
	d := s.a.Check(req)
	if s.tracer != nil {
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(tracing.Tenant.String(req.Tenant), tracing.Cost.Int64(max(req.Cost, 1)),
				tracing.Allowed.Bool(d.Allowed), tracing.Rule.String(d.Rule), tracing.Fallback.Bool(d.Fallback))
		}
	}
	decisionToProto(d, out)
	return out, nil
}

// CheckStream answers each batch with its results, in order. Malformed
// checks get an error each and the batch's others are decided; a batch
// over MaxCheckBatch gets one error; neither ends the stream. A receiving
// goroutine reads the next batch while one is decided; the messages are
// reused from batch to batch, so a stream's steady state allocates only
// what decoding a batch does.
func (s *SidecarServer) CheckStream(stream allotpb.SidecarService_CheckStreamServer) error {
	const buffers = 2
	received := make(chan *allotpb.CheckBatch, buffers)
	free := make(chan *allotpb.CheckBatch, buffers)
	for range buffers {
		free <- &allotpb.CheckBatch{}
	}
	recvErr := make(chan error, 1)
	go func() {
		// Ends when the stream does: the handler's return makes RecvMsg fail.
		for in := range free {
			in.Reset()
			if err := stream.RecvMsg(in); err != nil {
				recvErr <- err
				return
			}
			received <- in
		}
	}()
	out := &allotpb.CheckResults{}
	var spare []*allotpb.CheckResponse
	for {
		var in *allotpb.CheckBatch
		select {
		case in = <-received:
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-s.draining:
			return nil
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
		out.Id, out.Error = in.Id, ""
		out.Results = out.Results[:0]
		var span trace.Span
		if s.tracer != nil && trace.SpanFromContext(stream.Context()).IsRecording() {
			_, span = s.tracer.Start(stream.Context(), "allot.v1.SidecarService/CheckStream batch",
				trace.WithAttributes(attribute.Int("allot.batch.checks", len(in.Checks))))
		}
		if n := len(in.Checks); n > MaxCheckBatch {
			out.Error = fmt.Sprintf("a batch of %d checks: at most %d are taken in one batch", n, MaxCheckBatch)
		} else {
			for len(spare) < n {
				spare = append(spare, &allotpb.CheckResponse{})
			}
			for i, c := range in.Checks {
				r := spare[i]
				req, err := requestFromProto(c)
				if err != nil {
					*r = allotpb.CheckResponse{Error: err.Error()}
				} else {
					decisionToProto(s.a.Check(req), r)
				}
				out.Results = append(out.Results, r)
			}
		}
		if span != nil {
			endBatchSpan(span, out)
		}
		free <- in
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// endBatchSpan ends a CheckStream batch's span with what was decided.
func endBatchSpan(span trace.Span, out *allotpb.CheckResults) {
	refused, invalid := 0, 0
	for _, r := range out.Results {
		switch {
		case r.GetError() != "":
			invalid++
		case !r.GetAllowed():
			refused++
		}
	}
	span.SetAttributes(attribute.Int("allot.batch.refused", refused), attribute.Int("allot.batch.invalid", invalid))
	if out.Error != "" {
		span.SetStatus(otelcodes.Error, out.Error)
	}
	span.End()
}

// requestFromProto converts and validates a wire request.
func requestFromProto(in *allotpb.CheckRequest) (agent.Request, error) {
	var p agent.Priority
	switch in.GetPriority() {
	case allotpb.Priority_PRIORITY_UNSPECIFIED, allotpb.Priority_PRIORITY_INTERACTIVE:
		p = agent.Interactive
	case allotpb.Priority_PRIORITY_BATCH:
		p = agent.Batch
	case allotpb.Priority_PRIORITY_CRITICAL:
		p = agent.Critical
	case allotpb.Priority_PRIORITY_EXEMPT:
		p = agent.Exempt
	default:
		return agent.Request{}, fmt.Errorf("%w: priority: unknown value %d", agent.ErrInvalidRequest, in.GetPriority())
	}
	// An explicit cost of 0 is a peek; an absent one means 1, as a 0 did
	// before cost had presence (clients that set none, or 0, send none).
	req := agent.Request{Tenant: in.GetTenant(), Plan: in.GetPlan(), User: in.GetUser(), Route: in.GetRoute(),
		IP: in.GetIp(), Priority: p, Cost: in.GetCost(), Peek: in.Cost != nil && *in.Cost == 0}
	if err := agent.ValidateRequest(req); err != nil {
		return agent.Request{}, err
	}
	return req, nil
}

// decisionToProto writes a decision into a wire response, in place.
func decisionToProto(d agent.Decision, out *allotpb.CheckResponse) {
	retry := int64(0)
	if !d.Allowed {
		retry = int64(d.RetryAfter)
		if d.RetryAfter < 0 {
			retry = -1
		}
	}
	out.Allowed, out.Rule, out.Scope = d.Allowed, d.Rule, d.Scope
	out.Limit, out.PeriodNanos, out.Remaining = d.Limit, int64(d.Period), max(d.Remaining, 0)
	out.RetryAfterNanos, out.ResetAfterNanos, out.Fallback, out.Error = retry, int64(d.ResetAfter), d.Fallback, ""
}

// DecisionFromProto is the Decision a wire response carries, for clients.
// A refusal naming no rule that may be retried is the sidecar's for want
// of rules (NoRules): the only other refusal naming no rule, a cost that
// never fits, has retry_after_nanos -1.
func DecisionFromProto(r *allotpb.CheckResponse) agent.Decision {
	return agent.Decision{Allowed: r.GetAllowed(), Rule: r.GetRule(), Scope: r.GetScope(), Limit: r.GetLimit(),
		Period: time.Duration(r.GetPeriodNanos()), Remaining: r.GetRemaining(),
		RetryAfter: time.Duration(r.GetRetryAfterNanos()), ResetAfter: time.Duration(r.GetResetAfterNanos()),
		Fallback: r.GetFallback(), NoRules: !r.GetAllowed() && r.GetError() == "" && r.GetRule() == "" && r.GetRetryAfterNanos() > 0}
}

// RequestToProto is a request as the wire carries it, for clients. A
// cost of 0 is left absent (1), and a peek is sent as an explicit 0: the
// wire peeks at cost 1, whatever r.Cost.
func RequestToProto(r agent.Request, out *allotpb.CheckRequest) {
	p := allotpb.Priority_PRIORITY_INTERACTIVE
	switch r.Priority {
	case agent.Batch:
		p = allotpb.Priority_PRIORITY_BATCH
	case agent.Critical:
		p = allotpb.Priority_PRIORITY_CRITICAL
	case agent.Exempt:
		p = allotpb.Priority_PRIORITY_EXEMPT
	}
	out.Tenant, out.Plan, out.User, out.Route, out.Ip = r.Tenant, r.Plan, r.User, r.Route, r.IP
	out.Priority = p
	switch {
	case r.Peek:
		out.Cost = proto.Int64(0)
	case r.Cost != 0:
		out.Cost = proto.Int64(r.Cost)
	default:
		out.Cost = nil
	}
}

// Reserve decides one request at its cost taken as an estimate, and
// names a reservation for Settle when it is admitted.
func (s *SidecarServer) Reserve(_ context.Context, in *allotpb.CheckRequest) (*allotpb.CheckResponse, error) {
	req, err := requestFromProto(in)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	d, res := s.a.Reserve(req)
	out := &allotpb.CheckResponse{}
	decisionToProto(d, out)
	if res.ID() != 0 {
		out.Reservation = strconv.FormatUint(res.ID(), 10)
	}
	return out, nil
}

// Settle settles a reservation at the actual cost.
func (s *SidecarServer) Settle(_ context.Context, in *allotpb.SettleRequest) (*allotpb.SettleResponse, error) {
	id, err := strconv.ParseUint(in.GetReservation(), 10, 64)
	if err != nil || id == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "reservation: %q is not one Reserve answered", in.GetReservation())
	}
	if in.Cost == nil {
		return nil, status.Errorf(codes.InvalidArgument, "cost: required (the actual cost, 0 to %d)", int64(agent.MaxCost))
	}
	st, err := s.a.Settle(agent.ReservationFromID(id), in.GetCost())
	switch {
	case errors.Is(err, agent.ErrNoReservation):
		return nil, status.Error(codes.NotFound, err.Error())
	case errors.Is(err, agent.ErrSettled):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case err != nil:
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &allotpb.SettleResponse{Estimate: st.Estimate, Actual: st.Actual, Charged: st.Charged}, nil
}
