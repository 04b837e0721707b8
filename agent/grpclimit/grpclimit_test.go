package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/agenttest"
	"github.com/allot-io/allot/agent/grpclimit"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestGRPCInterceptor(t *testing.T) {
	clk := agenttest.NewClock()
	a := agenttest.Standalone(t, clk, agenttest.Rule("user", rules.User, algo.GCRA, 1, time.Second, lease.Abuse))
	intercept := grpclimit.UnaryServerInterceptor(a, func(ctx context.Context, method string) agent.Request {
		return agent.Request{Tenant: "t", User: "u", Route: method}
	})
	handler := func(ctx context.Context, req any) (any, error) { return "ok", nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/svc/Method"}
	if _, err := intercept(context.Background(), nil, info, handler); err != nil {
		t.Fatal(err)
	}
	_, err := intercept(context.Background(), nil, info, handler)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("code %v", st.Code())
	}
	var retryInfo *errdetails.RetryInfo
	var errInfo *errdetails.ErrorInfo
	for _, d := range st.Details() {
		switch v := d.(type) {
		case *errdetails.RetryInfo:
			retryInfo = v
		case *errdetails.ErrorInfo:
			errInfo = v
		}
	}
	if retryInfo == nil || retryInfo.GetRetryDelay().AsDuration() != time.Second {
		t.Errorf("RetryInfo %v", retryInfo)
	}
	if errInfo == nil || errInfo.GetMetadata()["scope"] != "user" || errInfo.GetReason() != "RATE_LIMITED" {
		t.Errorf("ErrorInfo %v", errInfo)
	}
	stream := grpclimit.StreamServerInterceptor(a, func(ctx context.Context, method string) agent.Request { return agent.Request{Tenant: "t", User: "u"} })
	if err := stream(nil, fakeStream{}, &grpc.StreamServerInfo{FullMethod: "/svc/S"}, func(any, grpc.ServerStream) error { return nil }); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("stream: %v", err)
	}
}

type fakeStream struct{ grpc.ServerStream }

func (fakeStream) Context() context.Context { return context.Background() }
