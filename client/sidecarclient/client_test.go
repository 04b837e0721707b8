package sidecarclient_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/sidecar"
	"github.com/allot-io/allot/client/sidecarclient"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// quotaRules admit 100 units per tenant in a long window: nothing refills
// during a test, so what is admitted is exactly countable.
const quotaRules = `
rules:
  - {name: per-tenant, scope: tenant, algorithm: fixed_window, limit: 100, period: 1h, intent: quota}
`

// testSidecar serves a standalone agent's SidecarService on a loopback port.
type testSidecar struct {
	a    *agent.Agent
	addr string
	g    *grpc.Server
}

// quotaAgent is a standalone agent on quotaRules, closed at cleanup.
func quotaAgent(t testing.TB) *agent.Agent {
	t.Helper()
	rs, err := rules.Parse("rules.yaml", []byte(quotaRules))
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Rules: rs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

func startSidecar(t testing.TB, addr string, a *agent.Agent) *testSidecar {
	t.Helper()
	if a == nil {
		a = quotaAgent(t)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	sidecar.NewSidecarServer(a).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return &testSidecar{a: a, addr: lis.Addr().String(), g: g}
}

func newClient(t testing.TB, addr string) *sidecarclient.Client {
	t.Helper()
	c, err := sidecarclient.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCheckMatchesTheLibrary(t *testing.T) {
	s := startSidecar(t, "127.0.0.1:0", nil)
	c := newClient(t, s.addr)
	ctx := context.Background()
	for i := range 101 {
		d, err := c.Check(ctx, agent.Request{Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 100; d.Allowed != want {
			t.Fatalf("check %d: allowed %v, want %v", i+1, d.Allowed, want)
		}
		if d.Rule != "per-tenant" || d.Scope != "tenant" || d.Limit != 100 || d.Period != time.Hour {
			t.Fatalf("check %d: %+v", i+1, d)
		}
		if i == 100 && (d.RetryAfter <= 0 || d.Remaining != 0) {
			t.Fatalf("refusal without retry: %+v", d)
		}
	}
}

// TestConcurrentChecksCountExactly sends many checks from many goroutines,
// which the client coalesces into batches: every one is answered, and the
// sidecar admits exactly the quota, no more and no fewer.
func TestConcurrentChecksCountExactly(t *testing.T) {
	s := startSidecar(t, "127.0.0.1:0", nil)
	c := newClient(t, s.addr)
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 50 {
				tenant := []string{"a", "b", "c", "d"}[(g+i)%4]
				d, err := c.Check(context.Background(), agent.Request{Tenant: tenant})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				} else {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 400 || refused.Load() != 32*50-400 {
		t.Fatalf("admitted %d, refused %d; want 400 and %d", admitted.Load(), refused.Load(), 32*50-400)
	}
}

func TestInvalidRequestIsNotCounted(t *testing.T) {
	s := startSidecar(t, "127.0.0.1:0", nil)
	c := newClient(t, s.addr)
	ctx := context.Background()
	for _, req := range []agent.Request{
		{Tenant: strings.Repeat("t", agent.MaxNameLen+1)},
		{Tenant: "acme", Cost: -1},
		{Tenant: "acme", Cost: agent.MaxCost + 1},
		{Tenant: "acme", User: strings.Repeat("u", agent.MaxAttrLen+1)},
	} {
		if _, err := c.Check(ctx, req); !errors.Is(err, sidecarclient.ErrInvalid) {
			t.Fatalf("%.40v: err %v, want ErrInvalid", req, err)
		}
	}
	// The stream goes on, and nothing was spent.
	for i := range 100 {
		if d, err := c.Check(ctx, agent.Request{Tenant: "acme"}); err != nil || !d.Allowed {
			t.Fatalf("check %d after invalid ones: %+v, %v", i+1, d, err)
		}
	}
}

func TestUnaryCheck(t *testing.T) {
	s := startSidecar(t, "127.0.0.1:0", nil)
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rpc := allotpb.NewSidecarServiceClient(conn)
	resp, err := rpc.Check(context.Background(), &allotpb.CheckRequest{Tenant: "acme", Cost: proto.Int64(100), Priority: allotpb.Priority_PRIORITY_BATCH})
	if err != nil || !resp.GetAllowed() || resp.GetRemaining() != 0 {
		t.Fatalf("%v, %v", resp, err)
	}
	resp, err = rpc.Check(context.Background(), &allotpb.CheckRequest{Tenant: "acme"})
	if err != nil || resp.GetAllowed() || resp.GetRetryAfterNanos() <= 0 {
		t.Fatalf("over the quota: %v, %v", resp, err)
	}
	_, err = rpc.Check(context.Background(), &allotpb.CheckRequest{Tenant: "acme", Priority: 99})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unknown priority: %v, want INVALID_ARGUMENT", err)
	}
}

// TestOversizedBatch sends a batch over MaxCheckBatch on a raw stream: it
// is refused whole, nothing in it counted, and the stream goes on.
func TestOversizedBatch(t *testing.T) {
	s := startSidecar(t, "127.0.0.1:0", nil)
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := allotpb.NewSidecarServiceClient(conn).CheckStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	big := &allotpb.CheckBatch{Id: 7}
	for range sidecar.MaxCheckBatch + 1 {
		big.Checks = append(big.Checks, &allotpb.CheckRequest{Tenant: "acme"})
	}
	if err := stream.Send(big); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil || res.GetId() != 7 || res.GetError() == "" || len(res.GetResults()) != 0 {
		t.Fatalf("oversized batch: %v, %v", res, err)
	}
	ok := &allotpb.CheckBatch{Id: 8}
	for range 100 {
		ok.Checks = append(ok.Checks, &allotpb.CheckRequest{Tenant: "acme"})
	}
	ok.Checks = append(ok.Checks, &allotpb.CheckRequest{Tenant: "acme", Cost: proto.Int64(-5)}, &allotpb.CheckRequest{Tenant: "acme"})
	if err := stream.Send(ok); err != nil {
		t.Fatal(err)
	}
	if res, err = stream.Recv(); err != nil || res.GetId() != 8 || len(res.GetResults()) != 102 {
		t.Fatalf("next batch: %v, %v", res, err)
	}
	for i, r := range res.GetResults() {
		switch {
		case i < 100 && !r.GetAllowed():
			t.Fatalf("check %d refused: the oversized batch was counted", i)
		case i == 100 && (r.GetError() == "" || r.GetAllowed()):
			t.Fatalf("negative cost: %v", r)
		case i == 101 && r.GetAllowed():
			t.Fatalf("the 101st unit admitted: %v", r)
		}
	}
}

// TestSidecarRestart: checks in flight when the sidecar goes away fail
// with ErrStream, and once it is back the client opens a new stream.
func TestSidecarRestart(t *testing.T) {
	a := quotaAgent(t)
	s := startSidecar(t, "127.0.0.1:0", a)
	c := newClient(t, s.addr)
	ctx := context.Background()
	if _, err := c.Check(ctx, agent.Request{Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	s.g.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Check(cctx, agent.Request{Tenant: "acme"})
		cancel()
		if err != nil {
			if !errors.Is(err, sidecarclient.ErrStream) && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("sidecar down: %v, want ErrStream", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("checks still answered after the sidecar stopped")
		}
	}
	startSidecar(t, s.addr, a)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		d, err := c.Check(cctx, agent.Request{Tenant: "acme"})
		cancel()
		if err == nil {
			if !d.Allowed || d.Rule != "per-tenant" {
				t.Fatalf("after the restart: %+v", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer after the sidecar came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCheckAfterClose(t *testing.T) {
	s := startSidecar(t, "127.0.0.1:0", nil)
	c := newClient(t, s.addr)
	c.Close()
	if _, err := c.Check(context.Background(), agent.Request{Tenant: "acme"}); !errors.Is(err, sidecarclient.ErrClosed) {
		t.Fatalf("err %v, want ErrClosed", err)
	}
}

// TestDrainEndsStreams: a server draining ends its open streams, so that
// GracefulStop returns; the client's next check finds it gone.
func TestDrainEndsStreams(t *testing.T) {
	a := quotaAgent(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv := sidecar.NewSidecarServer(a)
	srv.Register(g)
	go g.Serve(lis)
	c := newClient(t, lis.Addr().String())
	if _, err := c.Check(context.Background(), agent.Request{Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		srv.Drain()
		g.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		g.Stop()
		t.Fatal("GracefulStop held up by an open CheckStream")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Check(ctx, agent.Request{Tenant: "acme"}); err == nil {
		t.Fatal("a check answered by a stopped server")
	}
}
