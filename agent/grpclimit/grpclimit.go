package grpclimit

import (
	"context"
	"fmt"

	"github.com/allot-io/allot/agent"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// UnaryServerInterceptor checks every unary call with the agent. extract
// turns a call into the agent's agent.Request. A refused call fails with
// RESOURCE_EXHAUSTED carrying a google.rpc.RetryInfo (when to retry) and a
// google.rpc.ErrorInfo (reason RATE_LIMITED, with the rule and scope).
func UnaryServerInterceptor(a *agent.Agent, extract func(ctx context.Context, method string) agent.Request) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if d := a.Check(extract(ctx, info.FullMethod)); !d.Allowed {
			return nil, RefusalStatus(d).Err()
		}
		return next(ctx, req)
	}
}

// StreamServerInterceptor checks every stream once, when it opens.
func StreamServerInterceptor(a *agent.Agent, extract func(ctx context.Context, method string) agent.Request) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
		if d := a.Check(extract(ss.Context(), info.FullMethod)); !d.Allowed {
			return RefusalStatus(d).Err()
		}
		return next(srv, ss)
	}
}

// RefusalStatus is the gRPC status of a refused decision. A refusal for
// want of rules (agent.Decision.NoRules) has the reason NO_RULES.
func RefusalStatus(d agent.Decision) *status.Status {
	msg, reason := fmt.Sprintf("rate limited by %s limit %q", d.Scope, d.Rule), "RATE_LIMITED"
	if d.NoRules {
		msg, reason = "refused: the rate limiter has no rules yet", "NO_RULES"
	}
	st := status.New(codes.ResourceExhausted, msg)
	var details []protoadapt.MessageV1
	if d.RetryAfter >= 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
	}
	details = append(details, &errdetails.ErrorInfo{Reason: reason, Domain: "allot", Metadata: map[string]string{"scope": d.Scope, "rule": d.Rule}})
	if withDetails, err := st.WithDetails(details...); err == nil {
		return withDetails
	}
	return st
}
