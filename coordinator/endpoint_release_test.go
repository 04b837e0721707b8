package coordinator

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// TestInterceptorsLetTheRequestGo: once a handler is done with its
// request, the server's interceptors do not keep it reachable. A report
// waits for its allocation round after its demand is folded in, and a
// request held meanwhile by the metrics interceptor kept every waiting
// report's decoded demand on the leader's heap (issue 41).
func TestInterceptorsLetTheRequestGo(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	chain := []grpc.UnaryServerInterceptor{releasingRequest(m.grpc.UnaryServerInterceptor()), markHandled}
	info := &grpc.UnaryServerInfo{FullMethod: "/allot.v1.AgentService/Report"}
	collected := make(chan struct{})
	request := func() any {
		req := &allotpb.ReportRequest{Node: "gw-1", Demand: []*allotpb.KeyDemand{{Rule: "api", Key: "acme"}}}
		runtime.AddCleanup(req, func(ch chan struct{}) { close(ch) }, collected)
		return req
	}
	handler := func(ctx context.Context, req any) (any, error) {
		if req.(*allotpb.ReportRequest).GetNode() != "gw-1" {
			return nil, errors.New("the handler got another request")
		}
		// The handler is done with it (as the coordinator's is once the
		// report's demand is folded in) and waits, as for a round.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			runtime.GC()
			select {
			case <-collected:
				return &allotpb.ReportResponse{}, nil
			case <-time.After(10 * time.Millisecond):
			}
		}
		return nil, errors.New("the request stayed reachable while the handler waited")
	}
	next := handler
	for i := len(chain) - 1; i >= 0; i-- {
		intercept, inner := chain[i], next
		next = func(ctx context.Context, req any) (any, error) { return intercept(ctx, req, info, inner) }
	}
	if _, err := next(context.Background(), request()); err != nil {
		t.Fatal(err)
	}
}
