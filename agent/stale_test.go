package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// forgetfulTransport plays a coordinator that applies a batch, loses its
// answer, and forgets the incarnation while the agent is cut off, as the
// coordinators do after a day: then, as they do, it refuses a batch cut
// before it forgot as stale, recording it as applied.
type forgetfulTransport struct {
	mu          sync.Mutex
	known       bool
	lastSeq     uint64
	staleBefore int64 // ns; 0 until it forgets
	loseNext    bool
	admitted    uint64
	stale       int
}

func (f *forgetfulTransport) Report(_ context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := req.GetUsage(); b.GetSeq() > 0 {
		switch {
		case !f.known && f.staleBefore != 0 && b.GetCutUnixNano() < f.staleBefore:
			f.known, f.lastSeq = true, b.GetSeq()
			f.stale++
			st, _ := status.New(codes.FailedPrecondition, "usage batch cut long ago by a forgotten incarnation").WithDetails(
				&errdetails.ErrorInfo{Reason: allotpb.ReasonStaleBatch, Domain: allotpb.ErrorDomain})
			return nil, st.Err()
		case b.GetSeq() > f.lastSeq:
			for _, c := range b.GetCounts() {
				f.admitted += c.GetAdmitted()
			}
			f.known, f.lastSeq = true, b.GetSeq()
			if f.loseNext {
				// A day later, on the coordinators' clock: the batch was
				// cut before it forgot.
				f.loseNext, f.known, f.lastSeq, f.staleBefore = false, false, 0, b.GetCutUnixNano()+int64(time.Hour)
				return nil, status.Error(codes.Unavailable, "the answer was lost, and the agent cut off for a day")
			}
		}
	}
	return &allotpb.ReportResponse{AckedSeq: f.lastSeq, CoordinatorUnixNano: time.Now().UnixNano(), Nodes: 1}, nil
}

func (f *forgetfulTransport) counts() (admitted uint64, stale int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.admitted, f.stale
}

// TestStaleBatchCountedOnce: a batch the coordinators applied, whose
// answer was lost and whose incarnation they then forgot, is refused as
// stale when sent again: the agent counts its units as quarantined, sends
// it once more to have it acknowledged, and goes on; nothing is counted
// twice and nothing after it is lost.
func TestStaleBatchCountedOnce(t *testing.T) {
	tr := &forgetfulTransport{}
	a := transportAgent(t, tr, prometheus.NewRegistry(), rule("quota", rules.Tenant, algo.TokenBucket, 1000, time.Second, lease.Quota))
	testwait.For(t, 10*time.Second, "the agent to have joined", func() bool { return !a.joining.Load() })
	tr.mu.Lock()
	tr.loseNext = true
	tr.mu.Unlock()
	for range 5 {
		a.Check(Request{Tenant: "acme"})
	}
	testwait.For(t, 10*time.Second, "the stale batch refused and acknowledged", func() bool {
		_, stale := tr.counts()
		return stale == 1 && a.rep.pendingCount.Load() == 0
	})
	for range 2 {
		a.Check(Request{Tenant: "acme"})
	}
	testwait.For(t, 10*time.Second, "the next batch counted", func() bool { adm, _ := tr.counts(); return adm >= 7 })
	if adm, stale := tr.counts(); adm != 7 || stale != 1 {
		t.Fatalf("the coordinator counted %d admitted and refused %d batches as stale; want 7 (each once) and 1", adm, stale)
	}
	if got := counterValue(a.metrics.quarantined.WithLabelValues("usage", "stale_batch")); got != 1 {
		t.Errorf("quarantined stale usage entries = %v, want 1", got)
	}
	if got := counterValue(a.metrics.quarantinedUnits.WithLabelValues("admitted")); got != 5 {
		t.Errorf("quarantined admitted units = %v, want the stale batch's 5", got)
	}
}
