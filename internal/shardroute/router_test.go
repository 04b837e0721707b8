package shardroute

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// group is a fake shard group: it applies a part only if it owns every
// slot in it and its sequence is new, as the state machine does.
type group struct {
	id      string
	owns    func(shard.Slot) bool
	lastSeq uint64
	applied map[string]uint64 // tenant → admitted
	seqs    []uint64          // every part seen, in order
	left    bool              // a last batch (UsageBatch.last) was applied
	fail    error             // answer every report with this, once
	// applyThenFail applies the part, then answers with an error: a
	// leader that committed and died before answering.
	applyThenFail bool
	version       uint64
	// clock is the received and answered times its answers carry.
	clock [2]int64
	// after holds its answer until closed; answered is closed when it
	// first answers.
	after, answered chan struct{}
}

func (g *group) Learn([]string) {}

func (g *group) Report(_ context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	if req.GetGroup() != "" && req.GetGroup() != g.id {
		return nil, status.Errorf(codes.FailedPrecondition, "this is %s, not %s", g.id, req.GetGroup())
	}
	if err := g.fail; err != nil {
		g.fail = nil
		return nil, err
	}
	if b := req.GetUsage(); b != nil {
		g.seqs = append(g.seqs, b.GetSeq())
		if b.GetSeq() > g.lastSeq {
			var moved []uint32
			for _, c := range b.GetCounts() {
				if s := shard.Of(c.GetTenant()); !g.owns(s) {
					moved = append(moved, uint32(s))
				}
			}
			if moved != nil {
				st, _ := status.New(codes.FailedPrecondition, "moved").WithDetails(&allotpb.SlotsMoved{Group: g.id, Slots: moved, MapVersion: g.version})
				return nil, st.Err()
			}
			for _, c := range b.GetCounts() {
				g.applied[c.GetTenant()] += c.GetAdmitted()
			}
			g.lastSeq = b.GetSeq()
			g.left = g.left || b.GetLast()
		}
	}
	if g.applyThenFail {
		g.applyThenFail = false
		return nil, status.Error(codes.Unavailable, "leader died after commit")
	}
	if g.after != nil {
		<-g.after
	}
	if g.answered != nil {
		close(g.answered)
		g.answered = nil
	}
	return &allotpb.ReportResponse{AckedSeq: g.lastSeq, Group: g.id, ShardMapVersion: g.version, RenewUnixNano: 1,
		ReceivedUnixNano: g.clock[0], CoordinatorUnixNano: g.clock[1]}, nil
}

// region is a home group and g1, with a map that can send tenant "b"
// to g1.
type region struct {
	home, g1 *group
	m        *shard.Map
}

func newRegion(t *testing.T) (*region, *Router) {
	t.Helper()
	r := &region{
		home: &group{id: "main", owns: func(shard.Slot) bool { return true }, applied: map[string]uint64{}},
		g1:   &group{id: "g1", owns: func(shard.Slot) bool { return false }, applied: map[string]uint64{}},
	}
	rt := New(r.home, Config{
		Lane: func(string, []string) Lane { return r.g1 },
		Map: func(context.Context, uint64) (*allotpb.ShardMap, error) {
			if r.m == nil {
				return nil, errors.New("no map yet")
			}
			return r.m.Proto(), nil
		},
	})
	return r, rt
}

// moveB moves tenant b's slot to g1, as a finished move leaves it.
func (r *region) moveB(t *testing.T) {
	t.Helper()
	sb := shard.Of("b")
	r.m = shard.Single("main", []string{"home:1"})
	r.m.Groups["g1"] = []string{"g1:1"}
	if err := r.m.Assign(sb, sb, "g1"); err != nil {
		t.Fatal(err)
	}
	r.m.Version = 2
	r.home.owns = func(s shard.Slot) bool { return s != sb }
	r.g1.owns = func(s shard.Slot) bool { return s == sb }
	r.home.version, r.g1.version = 2, 2
}

func batch(seq uint64, counts ...*allotpb.UsageCount) *allotpb.ReportRequest {
	return &allotpb.ReportRequest{Node: "gw", Incarnation: 1, Usage: &allotpb.UsageBatch{Seq: seq, Counts: counts}}
}

func count(tenant string, n uint64) *allotpb.UsageCount {
	return &allotpb.UsageCount{Rule: "q", Tenant: tenant, Admitted: n}
}

func TestRouterRoutesMovedUsageOnce(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		// before runs after the first batch is acknowledged, before the
		// second is sent.
		before func(*region)
		// homeSeqs are the sequence numbers the home group sees.
		homeSeqs []uint64
	}{
		{"the home refuses b's slot", func(*region) {}, []uint64{1, 2, 3}},
		{"the home is unreachable once", func(r *region) { r.home.fail = status.Error(codes.Unavailable, "down") }, []uint64{1, 2, 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, rt := newRegion(t)
			resp, err := rt.Report(ctx, batch(1, count("a", 1), count("b", 2)))
			if err != nil || resp.GetAckedSeq() != 1 {
				t.Fatalf("first batch: %v, acked %d", err, resp.GetAckedSeq())
			}
			r.moveB(t)
			c.before(r)
			req := batch(2, count("a", 10), count("b", 20))
			for i := 0; i < 3 && resp.GetAckedSeq() < 2; i++ {
				resp, err = rt.Report(ctx, req)
			}
			if err != nil || resp.GetAckedSeq() != 2 {
				t.Fatalf("second batch: %v, acked %d", err, resp.GetAckedSeq())
			}
			if r.home.applied["a"] != 11 || r.home.applied["b"] != 2 || r.g1.applied["b"] != 20 {
				t.Fatalf("home %v, g1 %v; want a 11 and b 2 at home, b 20 at g1", r.home.applied, r.g1.applied)
			}
			if rt.Version() != 2 {
				t.Fatalf("router at map version %d, want 2", rt.Version())
			}
		})
	}
}

// TestRouterLastBatchReachesEveryGroup: a reporter's last batch (a clean
// shutdown, no counts) goes to every group it sent usage to, each in its
// own sequence, so that no group's windows wait for the reporter until
// the agent timeout; a group it never sent usage to is not told.
func TestRouterLastBatchReachesEveryGroup(t *testing.T) {
	ctx := context.Background()
	for _, moved := range []bool{true, false} {
		t.Run(fmt.Sprintf("b moved %v", moved), func(t *testing.T) {
			r, rt := newRegion(t)
			if moved {
				r.moveB(t)
			}
			if resp, err := rt.Report(ctx, batch(1, count("a", 1), count("b", 2))); err != nil || resp.GetAckedSeq() != 1 {
				t.Fatalf("usage: %v, acked %d", err, resp.GetAckedSeq())
			}
			last := batch(2)
			last.Usage.Last = true
			if resp, err := rt.Report(ctx, last); err != nil || resp.GetAckedSeq() != 2 {
				t.Fatalf("last batch: %v, acked %d", err, resp.GetAckedSeq())
			}
			if !r.home.left || r.g1.left != moved {
				t.Fatalf("home told %v, g1 told %v (seqs %v and %v); want home told, g1 told only when it got usage", r.home.left, r.g1.left, r.home.seqs, r.g1.seqs)
			}
		})
	}
}

// TestRouterResendsUnknownPartsUnchanged: a part whose answer was lost is
// sent again with the same sequence and counts, even after the map moved
// its tenant: the group may have applied it.
func TestRouterResendsUnknownPartsUnchanged(t *testing.T) {
	ctx := context.Background()
	r, rt := newRegion(t)
	r.home.applyThenFail = true // applied at home, answer lost
	req := batch(1, count("a", 1), count("b", 2))
	if _, err := rt.Report(ctx, req); err == nil {
		t.Fatal("the lost answer was not reported as a failure")
	}
	r.moveB(t) // b moves after home applied it
	resp, err := rt.Report(ctx, req)
	if err != nil || resp.GetAckedSeq() != 1 {
		t.Fatalf("resend: %v, acked %d", err, resp.GetAckedSeq())
	}
	if fmt.Sprint(r.home.seqs) != "[1 1]" || r.g1.applied["b"] != 0 || r.home.applied["b"] != 2 {
		t.Fatalf("home saw %v, applied %v; g1 applied %v: want the same part twice at home, b counted once there", r.home.seqs, r.home.applied, r.g1.applied)
	}
}

// TestRouterTranslatesRefusals: a group's refusal of one count names it
// by its index in the reporter's batch, not the group's part.
func TestRouterTranslatesRefusals(t *testing.T) {
	ctx := context.Background()
	r, rt := newRegion(t)
	r.moveB(t)
	if _, err := rt.Report(ctx, batch(1, count("a", 1))); err != nil { // learn the map
		t.Fatal(err)
	}
	st, _ := status.New(codes.InvalidArgument, "bad").WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: "usage.counts[0].tenant", Description: "too long"},
	}})
	r.g1.fail = st.Err()
	_, err := rt.Report(ctx, batch(2, count("a", 1), count("a2", 1), count("b", 5)))
	var field string
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			field = br.GetFieldViolations()[0].GetField()
		}
	}
	if status.Code(err) != codes.InvalidArgument || field != "usage.counts[2].tenant" {
		t.Fatalf("refusal %v naming %q, want INVALID_ARGUMENT naming usage.counts[2].tenant", err, field)
	}
}

// TestRouterClockSpansTheWholeReport: the answer the reporter gets says
// when its report arrived and when it was answered, as the home group's
// did, widened by the time the report spent elsewhere: a first exchange
// the home refused as moved, and the wait for another group's answer
// after the home's came. The reporter takes that span out of its round
// trip before it estimates its clock's offset; before the router carried
// received_unix_nano at all, every agent's clock ran ahead of the
// coordinators' by half the leader's wait for its allocation round.
func TestRouterClockSpansTheWholeReport(t *testing.T) {
	r, rt := newRegion(t)
	r.moveB(t) // the router learns it from the home's refusal
	const received, hold = int64(1_000_000_000), int64(200_000_000)
	r.home.clock = [2]int64{received, received + hold}
	homeAnswered := make(chan struct{})
	r.home.answered, r.g1.after = homeAnswered, homeAnswered // g1 answers after the home
	start := time.Now()
	resp, err := rt.Report(context.Background(), batch(1, count("a", 1), count("b", 2)))
	elapsed := time.Since(start)
	if err != nil || resp.GetAckedSeq() != 1 {
		t.Fatalf("report: %v, acked %d", err, resp.GetAckedSeq())
	}
	if r.home.applied["a"] != 1 || r.g1.applied["b"] != 2 {
		t.Fatalf("home %v, g1 %v; want a at home and b at g1", r.home.applied, r.g1.applied)
	}
	gotReceived, gotAnswered := resp.GetReceivedUnixNano(), resp.GetCoordinatorUnixNano()
	switch {
	case gotReceived == 0:
		t.Fatal("the merged answer does not say when the report arrived")
	case gotReceived > received:
		t.Errorf("received %d, after the home's %d: the refused first exchange is left in the round trip", gotReceived, received)
	case gotAnswered <= received+hold:
		t.Errorf("answered %d, want later than the home's %d: g1 answered after it", gotAnswered, received+hold)
	case gotAnswered-gotReceived > hold+int64(elapsed):
		t.Errorf("the span %v is longer than the home's hold and the whole call (%v)", time.Duration(gotAnswered-gotReceived), elapsed)
	}
}
