package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/internal/testwait"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestLimitCodecDoesNotDecodeOversize: a message larger than its
// method's bound is measured, not decoded; one within it is decoded.
func TestLimitCodecDoesNotDecodeOversize(t *testing.T) {
	c := newLimitCodec()
	want := &allotpb.GetRuleRequest{Name: strings.Repeat("r", 100)}
	b, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got := &allotpb.GetRuleRequest{}
	m := &limitedMessage{msg: got, max: len(b) - 1}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, m); err != nil {
		t.Fatal(err)
	}
	if m.size != len(b) || got.GetName() != "" || status.Code(m.err()) != codes.ResourceExhausted {
		t.Fatalf("over the bound: size %d, decoded %q, error %v; want %d, nothing decoded, RESOURCE_EXHAUSTED", m.size, got.GetName(), m.err(), len(b))
	}
	m = &limitedMessage{msg: got, max: len(b)}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, m); err != nil || m.err() != nil || !proto.Equal(got, want) {
		t.Fatalf("at the bound: %v, %v, decoded %v", err, m.err(), got)
	}
}

// TestOversizeAdminCallRefused: an admin call or a read larger than its
// method takes is refused with RESOURCE_EXHAUSTED before its handler
// runs; a method carrying many things at once takes more, and a report
// what MaxReportBytes says.
func TestOversizeAdminCallRefused(t *testing.T) {
	nodes := cluster(t, 1, nil)
	cc := dial(t, nodes[0].GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rulesOn := allotpb.NewRulesServiceClient(cc)
	big := strings.Repeat("r", maxSmallMessage)
	_, err := rulesOn.GetRule(ctx, &allotpb.GetRuleRequest{Name: big})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max") {
		t.Fatalf("a read of %d bytes: %v %.100s; want RESOURCE_EXHAUSTED", len(big), st.Code(), st.Message())
	}
	_, err = allotpb.NewClusterServiceClient(cc).Remove(ctx, &allotpb.RemoveRequest{Id: big})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted {
		t.Fatalf("an admin call of %d bytes: %v %.100s; want RESOURCE_EXHAUSTED", len(big), st.Code(), st.Message())
	}
	if n := counterValue(t, nodes[0], "grpc_server_msg_received_total", "grpc_method", "Remove"); n != 0 {
		t.Fatalf("the refused Remove reached the interceptors (%v messages received)", n)
	}
	// A rule set may be that large: it is read, and judged by the rules.
	rule := proto.Clone(quotaRule).(*allotpb.Rule)
	rule.Description = big
	if _, err := rulesOn.PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{rule}}); status.Code(err) == codes.ResourceExhausted {
		t.Fatalf("a rule set of %d bytes: %.100v", len(big), err)
	}
	if _, err := rulesOn.ListRules(ctx, &allotpb.ListRulesRequest{}); err != nil {
		t.Fatalf("a small read after the refusals: %v", err)
	}
}

// TestStreamsPerConnectionBounded: a connection holds at most
// MaxConcurrentStreams calls; a further call waits until one ends.
func TestStreamsPerConnectionBounded(t *testing.T) {
	nodes := cluster(t, 1, func(c *Config) { c.MaxConcurrentStreams = 2 })
	cc := dial(t, nodes[0].GRPCAddr())
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stops []context.CancelFunc
	for range 2 {
		wctx, stop := context.WithCancel(ctx)
		stops = append(stops, stop)
		w, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := hc.Check(short, &healthpb.HealthCheckRequest{})
	cancelShort()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a third call on a connection holding two: %v; want it to wait (DEADLINE_EXCEEDED)", err)
	}
	stops[0]()
	testwait.For(t, 10*time.Second, "the third call to go through once a stream ended", func() bool {
		short, cancelShort := context.WithTimeout(ctx, time.Second)
		defer cancelShort()
		_, err := hc.Check(short, &healthpb.HealthCheckRequest{})
		return err == nil
	})
	stops[1]()
}

// TestUnauthenticatedCallsCostLittle: with credentials configured, a
// call without one is refused as its stream is created: its message is
// never read, let alone decoded, and its handler and interceptors never
// run. Calls to the open methods (health checks) are bounded in number
// in flight and in the time they take to send their request.
func TestUnauthenticatedCallsCostLittle(t *testing.T) {
	const wait = 3 * time.Second
	nodes := cluster(t, 1, func(c *Config) {
		c.AdminToken = "s3cret"
		c.hooks = &testHooks{openRequestTimeout: wait}
	})
	c := nodes[0]
	cc := dial(t, c.GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := usageReport("gw-1", "eu-west", 1)
	for range 20_000 {
		req.Usage.Counts = append(req.Usage.Counts, &allotpb.UsageCount{Rule: "plan-quota", Tenant: strings.Repeat("t", 40), WindowUnix: req.Usage.Counts[0].GetWindowUnix(), Admitted: 1})
	}
	if size := proto.Size(req); size < 1<<20 {
		t.Fatalf("the report is only %d bytes", size)
	}
	_, err := allotpb.NewAgentServiceClient(cc).Report(ctx, req)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a report without a credential: %v; want UNAUTHENTICATED", err)
	}
	if n := counterValue(t, c, "grpc_server_started_total", "grpc_method", "Report"); n != 0 {
		t.Fatalf("the refused report reached the interceptors (%v started)", n)
	}
	if n := testutil.ToFloat64(c.metrics.authRefusals.WithLabelValues("Report", authz.ReasonNoCredential)); n != 1 {
		t.Fatalf("%v refusals of Report counted, want 1", n)
	}

	// Open calls that never send their request hold every place, then
	// lose them after the wait.
	hc := healthpb.NewHealthClient(cc)
	desc := &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true, ClientStreams: true}
	var held []grpc.ClientStream
	for range maxOpenStreams {
		s, err := cc.NewStream(ctx, desc, healthpb.Health_Watch_FullMethodName)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	testwait.For(t, 5*time.Second, "the open calls to hold every place", func() bool { return c.openCalls.Load() == maxOpenStreams })
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	_, err = hc.Check(short, &healthpb.HealthCheckRequest{})
	cancelShort()
	if status.Code(err) != codes.ResourceExhausted || counterValue(t, c, "allot_coordinator_open_calls_refused_total", "", "") != 1 {
		t.Fatalf("a health check with every place held: %v; want RESOURCE_EXHAUSTED, counted", err)
	}
	for _, s := range held {
		var resp healthpb.HealthCheckResponse
		if err := s.RecvMsg(&resp); err == nil || errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			t.Fatalf("a call that never sent its request: %v; want it ended by the coordinator", err)
		}
	}
	testwait.For(t, 5*time.Second, "the places to be given back", func() bool { return c.openCalls.Load() == 0 })
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a health check once the places are free: %v", err)
	}
	// A health Watch gives its place back once its request arrived.
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	if n := c.openCalls.Load(); n != 0 {
		t.Fatalf("a Watch streaming holds %d places", n)
	}
}
