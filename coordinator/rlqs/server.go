package rlqs

import (
	"context"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-io/allot/internal/timeutil"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// Bounds on what Envoys may hold on a member.
const (
	// maxQuotaBuckets bounds the buckets one stream tracks: its report
	// then stays well under the coordinators' message size. Beyond it a
	// new bucket gets no assignment; its usage is still billed.
	maxQuotaBuckets = 5_000
	// bucketIdleTTL is how long a bucket may go without usage before
	// the stream abandons it: Envoy drops it, and makes it again when a
	// request needs it. Kept forever, every tenant, user or route a long
	// stream ever saw held one of its maxQuotaBuckets, and once they were
	// all taken a new key got no assignment at all.
	bucketIdleTTL = 10 * time.Minute
	// maxBucketEntries bounds the entries of a bucket id that is mapped.
	maxBucketEntries = 16
	// maxHeld bounds the usage lines held for rules not known yet.
	maxHeld = 10_000
	// maxRLQSStreams bounds the streams one member serves: each is a node.
	maxRLQSStreams = 10_000
	// minExchangeGap spaces the exchanges that new buckets bring forward,
	// so that an Envoy announcing buckets one by one costs one report per
	// gap, not one per bucket.
	minExchangeGap = 100 * time.Millisecond
)

// Intake is what the RLQS front door needs of the member it runs on:
// the rules and settings its streams map and report by, and the way their
// reports go. Nothing else of the member is within its reach.
type Intake interface {
	// Rules is the rule set this member holds.
	Rules() *rules.Set
	// ReportInterval and BillingWindow are the cluster's settings (this
	// member's own until a leader has fixed them).
	ReportInterval() time.Duration
	BillingWindow() time.Duration
	// Reporter is the way one stream's reports go, taken at its first
	// report: to its group's leader, where the report is validated,
	// batched into the ledger and answered as an agent's; in a region
	// split into shard groups, to the group owning each tenant's slot.
	Reporter() Reporter
}

// Reporter carries one stream's reports, in order.
type Reporter interface {
	Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error)
}

// Metrics are the streams' metrics, registered by the member.
type Metrics struct {
	// Streams counts the streams open.
	Streams prometheus.Gauge
	// Requests counts the requests Envoys reported, by result: allowed,
	// denied, unmapped, refused.
	Requests *prometheus.CounterVec
	// Abandoned counts the buckets Envoys were told to abandon, by
	// reason: idle, rule_gone.
	Abandoned *prometheus.CounterVec
}

// Config is what a front door serves with.
type Config struct {
	Intake Intake
	// Region is the region the streams' reports are made in: the member's.
	Region  string
	Clock   timeutil.TimeSource
	Log     hclog.Logger
	Metrics Metrics
	// Caller names the credential a stream was opened with, "" for none
	// (a nil Caller names none): the stream's node is named after it.
	Caller func(ctx context.Context) string
	// Draining is closed when the member begins to close: every stream
	// ends, so that the gRPC server can stop.
	Draining <-chan struct{}
}

// Server serves Envoys' RLQS streams.
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	cfg Config
	// streams counts the streams served, for their bound.
	streams atomic.Int64
}

// New returns a front door that serves with cfg.
func New(cfg Config) *Server {
	if cfg.Caller == nil {
		cfg.Caller = func(context.Context) string { return "" }
	}
	return &Server{cfg: cfg}
}

func (s *Server) now() time.Time { return s.cfg.Clock.Now() }

// StreamRateLimitQuotas serves one Envoy.
func (s *Server) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	ctx := stream.Context()
	if n := s.streams.Add(1); n > maxRLQSStreams {
		s.streams.Add(-1)
		return status.Errorf(codes.ResourceExhausted, "this coordinator serves %d RLQS streams already; connect to another", maxRLQSStreams)
	}
	defer s.streams.Add(-1)
	q := newQuotaStream(s, s.cfg.Caller(ctx))
	q.rulesVersion = s.cfg.Intake.Rules().Version()
	s.cfg.Metrics.Streams.Inc()
	defer s.cfg.Metrics.Streams.Dec()
	s.cfg.Log.Debug("RLQS stream opened", "node", q.node)

	msgs := make(chan *rlqsv3.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := s.cfg.Clock.NewTicker(max(s.cfg.Intake.ReportInterval()/4, 50*time.Millisecond))
	defer tick.Stop()
	defer q.flush()
	for {
		select {
		case m := <-msgs:
			q.absorb(m)
		case <-tick.C():
		case err := <-recvErr:
			s.cfg.Log.Debug("RLQS stream closed", "node", q.node, "error", err)
			return nil
		case <-ctx.Done():
			return nil
		case <-s.cfg.Draining:
			return status.Error(codes.Unavailable, "coordinator shutting down; reconnect")
		}
		if !q.due() {
			continue
		}
		actions := q.exchange(ctx)
		if len(actions) == 0 {
			continue
		}
		if err := stream.Send(&rlqsv3.RateLimitQuotaResponse{BucketAction: actions}); err != nil {
			return err
		}
	}
}
