package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/agenttest"
	"github.com/allot-io/allot/agent/sidecar"
	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// tokenAgent enforces 1000 tokens per tenant per hour.
func tokenAgent(t *testing.T) *agent.Agent {
	t.Helper()
	a, err := agent.New(agent.Config{Clock: agenttest.NewClock(),
		Rules: []rules.Rule{agenttest.Rule("tokens", rules.Tenant, algo.FixedWindow, 1000, time.Hour, lease.Quota)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// TestHTTPReserveSettle: POST /v1/reserve admits at the estimate and
// names a reservation; POST /v1/settle charges the difference; bad
// settles are 400, unknown 404, repeated 409, and change nothing.
// Through a real HTTP server.
func TestHTTPReserveSettle(t *testing.T) {
	a := tokenAgent(t)
	mux := http.NewServeMux()
	mux.Handle("/v1/check", sidecar.CheckHandler(a))
	mux.Handle("/v1/reserve", sidecar.ReserveHandler(a))
	mux.Handle("/v1/settle", sidecar.SettleHandler(a))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	code, r := post(t, srv.URL+"/v1/reserve", `{"tenant":"llm-co","cost":300}`)
	id, _ := r["reservation"].(string)
	if code != http.StatusOK || id == "" || r["remaining"] != 700.0 || r["reason"] != nil {
		t.Fatalf("reserve: %d %v", code, r)
	}
	if _, r := post(t, srv.URL+"/v1/check", `{"tenant":"llm-co","cost":1}`); r["reservation"] != nil {
		t.Fatalf("/v1/check named a reservation: %v", r)
	}
	for _, tc := range []struct {
		body string
		code int
		want string
	}{
		{``, http.StatusBadRequest, "empty body"},
		{`{"reservation":"` + id + `"}`, http.StatusBadRequest, "cost: required"},
		{`{"reservation":"` + id + `","cost":-3}`, http.StatusBadRequest, "cost: must be from 0"},
		{`{"reservation":"` + id + `","cost":99999999999}`, http.StatusBadRequest, "cost: must be from 0"},
		{`{"reservation":"nope","cost":3}`, http.StatusBadRequest, "reservation:"},
		{`{"reservation":` + id + `,"cost":3}`, http.StatusBadRequest, "reservation must be a string"},
		{`{"reservation":"` + id + `","cost":"3"}`, http.StatusBadRequest, "cost must be an integer from 0 to 4294967295, got a JSON string"},
		{`{"reservation":"` + id + `","cost":3,"extra":1}`, http.StatusBadRequest, "unknown field"},
		{`{"reservation":"42","cost":3}`, http.StatusNotFound, "no such reservation"},
	} {
		code, r := post(t, srv.URL+"/v1/settle", tc.body)
		if msg, _ := r["error"].(string); code != tc.code || !strings.Contains(msg, tc.want) {
			t.Errorf("settle %q: %d %v, want %d with %q", tc.body, code, r, tc.code, tc.want)
		}
	}
	if a.OpenReservations() != 1 {
		t.Fatal("a refused settle closed the reservation")
	}
	// A cost the rule never admits at once: refused, with no retry-after
	// and a reason naming the rule and its limit.
	code, r = post(t, srv.URL+"/v1/reserve", `{"tenant":"llm-co","cost":1200}`)
	if reason, _ := r["reason"].(string); code != http.StatusTooManyRequests || r["retry_after_seconds"] != nil ||
		reason != "cost 1200 is more than rule tokens ever admits at once (its limit is 1000 per 3600s): no retry will be admitted; split the request or raise the limit" {
		t.Errorf("reserve of more than the limit: %d %v", code, r)
	}
	code, r = post(t, srv.URL+"/v1/settle", `{"reservation":"`+id+`","cost":450}`)
	if code != http.StatusOK || r["charged"] != 150.0 || r["actual"] != 450.0 {
		t.Fatalf("settle: %d %v", code, r)
	}
	if code, _ := post(t, srv.URL+"/v1/settle", `{"reservation":"`+id+`","cost":450}`); code != http.StatusConflict {
		t.Fatalf("a second settle: %d", code)
	}
	// 450 + the check's 1 spent of 1000.
	if _, r := post(t, srv.URL+"/v1/check", `{"tenant":"llm-co","cost":0}`); r["remaining"] != 549.0 {
		t.Fatalf("after settling: %v", r)
	}
}

// TestHTTPSettleOfAGuessIsNotFound: on a sidecar two callers share, one
// that guesses the other's reservation from its own (its low bits
// flipped, or counted on from it) settles nothing: 404, and the other's
// reservation stays open for its owner to settle.
func TestHTTPSettleOfAGuessIsNotFound(t *testing.T) {
	a := tokenAgent(t)
	mux := http.NewServeMux()
	mux.Handle("/v1/reserve", sidecar.ReserveHandler(a))
	mux.Handle("/v1/settle", sidecar.SettleHandler(a))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	reserve := func(tenant string) string {
		t.Helper()
		code, r := post(t, srv.URL+"/v1/reserve", `{"tenant":"`+tenant+`","cost":100}`)
		id, _ := r["reservation"].(string)
		if code != http.StatusOK || id == "" {
			t.Fatalf("reserve: %d %v", code, r)
		}
		return id
	}
	theirs := reserve("victim")
	mine, err := strconv.ParseUint(reserve("guesser"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	for k := uint64(1); k <= 64; k++ {
		for _, g := range []uint64{mine ^ k, mine + k, mine - k} {
			body := fmt.Sprintf(`{"reservation":"%d","cost":0}`, g)
			if code, r := post(t, srv.URL+"/v1/settle", body); code != http.StatusNotFound {
				t.Fatalf("settling %d, guessed from %d: %d %v, want 404", g, mine, code, r)
			}
		}
	}
	if code, r := post(t, srv.URL+"/v1/settle", `{"reservation":"`+theirs+`","cost":100}`); code != http.StatusOK {
		t.Fatalf("its owner settling: %d %v", code, r)
	}
}

// TestGRPCReserveSettle: the same over the gRPC sidecar.
func TestGRPCReserveSettle(t *testing.T) {
	a := tokenAgent(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	sidecar.NewSidecarServer(a).Register(g)
	go g.Serve(lis)
	defer g.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := allotpb.NewSidecarServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Reserve(ctx, &allotpb.CheckRequest{Tenant: "llm-co", Cost: proto.Int64(300)})
	if err != nil || !r.GetAllowed() || r.GetReservation() == "" {
		t.Fatalf("reserve: %v %v", r, err)
	}
	for _, tc := range []struct {
		req  *allotpb.SettleRequest
		code codes.Code
	}{
		{&allotpb.SettleRequest{Reservation: r.GetReservation()}, codes.InvalidArgument},
		{&allotpb.SettleRequest{Reservation: r.GetReservation(), Cost: proto.Int64(-1)}, codes.InvalidArgument},
		{&allotpb.SettleRequest{Reservation: "x", Cost: proto.Int64(1)}, codes.InvalidArgument},
		{&allotpb.SettleRequest{Reservation: "7", Cost: proto.Int64(1)}, codes.NotFound},
	} {
		if _, err := c.Settle(ctx, tc.req); status.Code(err) != tc.code {
			t.Errorf("settle %v: %v, want %v", tc.req, err, tc.code)
		}
	}
	s, err := c.Settle(ctx, &allotpb.SettleRequest{Reservation: r.GetReservation(), Cost: proto.Int64(100)})
	if err != nil || s.GetCharged() != -200 {
		t.Fatalf("settle: %v %v", s, err)
	}
	if _, err := c.Settle(ctx, &allotpb.SettleRequest{Reservation: r.GetReservation(), Cost: proto.Int64(100)}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a second settle: %v", err)
	}
	if p, _ := c.Check(ctx, &allotpb.CheckRequest{Tenant: "llm-co", Cost: proto.Int64(0)}); p.GetRemaining() != 900 {
		t.Fatalf("after settling: %v", p)
	}
}
