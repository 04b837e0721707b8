// Package rlqstest provides a stand-in for Envoy's rate_limit_quota filter,
// speaking RLQS with Envoy's own generated types, for tests and the chaos
// harness: the coordinators' RLQS service is checked against the protocol,
// not against a copy of the server's own assumptions.
package rlqstest

import (
	"context"
	"math"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Envoy reports one bucket's usage every Interval, as the filter does:
// of the load it is offered it allows what its assignment lets through
// (all of it while it has none, as no_assignment_behavior ALLOW_ALL),
// and it reconnects to the next address whenever its stream breaks.
type Envoy struct {
	Addrs    []string
	Bucket   map[string]string
	Interval time.Duration
	Dial     []grpc.DialOption

	mu       sync.Mutex
	demand   float64 // requests per second offered
	rate     float64 // the assignment's rate per second; -1 while none
	expires  time.Time
	got      time.Time
	abandons int
	allowed  uint64 // reported allowed, on every stream
	atRisk   uint64 // allowed in the last two reports of streams that broke
	streams  int
}

// New returns an Envoy offering demand requests per second; Run starts it.
func New(addrs []string, bucket map[string]string, demand float64, dial ...grpc.DialOption) *Envoy {
	return &Envoy{Addrs: addrs, Bucket: bucket, Interval: 200 * time.Millisecond, Dial: dial, demand: demand, rate: -1}
}

// SetDemand changes the load offered.
func (e *Envoy) SetDemand(d float64) { e.mu.Lock(); e.demand = d; e.mu.Unlock() }

// Assigned returns the assignment's rate per second while it is in force,
// else -1.
func (e *Envoy) Assigned() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rate < 0 || time.Now().After(e.expires) {
		return -1
	}
	return e.rate
}

// LastAssignment is when the last assignment arrived.
func (e *Envoy) LastAssignment() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return e.got }

// Reported is the requests reported allowed over every stream.
func (e *Envoy) Reported() uint64 { e.mu.Lock(); defer e.mu.Unlock(); return e.allowed }

// AtRisk is the requests reported allowed in the last two reports of each
// stream that broke: RLQS has no acknowledgement, so a server that
// crashed may never have recorded them.
func (e *Envoy) AtRisk() uint64 { e.mu.Lock(); defer e.mu.Unlock(); return e.atRisk }

// Streams is how many streams were opened.
func (e *Envoy) Streams() int { e.mu.Lock(); defer e.mu.Unlock(); return e.streams }

// Abandons is how many abandon actions arrived.
func (e *Envoy) Abandons() int { e.mu.Lock(); defer e.mu.Unlock(); return e.abandons }

// Run streams until ctx ends, moving to the next address on each break.
// At the end it closes its stream and waits for the server to end it, so
// the server has read every report.
func (e *Envoy) Run(ctx context.Context) error {
	for i := 0; ctx.Err() == nil; i++ {
		cc, err := grpc.NewClient(e.Addrs[i%len(e.Addrs)], e.Dial...)
		if err != nil {
			return err
		}
		e.stream(ctx, rlqsv3.NewRateLimitQuotaServiceClient(cc))
		cc.Close()
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func (e *Envoy) stream(ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient) {
	// The stream's own context outlives ctx, so that it can be closed
	// cleanly when ctx ends.
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := client.StreamRateLimitQuotas(sctx)
	if err != nil {
		return
	}
	e.mu.Lock()
	e.streams++
	e.mu.Unlock()
	broken := make(chan struct{})
	go func() {
		defer close(broken)
		for {
			resp, err := s.Recv()
			if err != nil {
				return
			}
			e.take(resp)
		}
	}()
	id := &rlqsv3.BucketId{Bucket: e.Bucket}
	var last2 [2]uint64
	defer func() {
		if ctx.Err() == nil { // broken, not closed
			e.mu.Lock()
			e.atRisk += last2[0] + last2[1]
			e.mu.Unlock()
		}
	}()
	last := time.Now()
	for {
		now := time.Now()
		el := now.Sub(last)
		last = now
		rate := e.Assigned()
		e.mu.Lock()
		offered := e.demand * el.Seconds()
		allowed := offered
		if rate >= 0 {
			allowed = math.Min(offered, rate*el.Seconds())
		}
		a, d := uint64(math.Round(allowed)), uint64(math.Round(offered-allowed))
		e.mu.Unlock()
		err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "test", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: id, TimeElapsed: durationpb.New(el), NumRequestsAllowed: a, NumRequestsDenied: d,
		}}})
		if err != nil {
			return
		}
		e.mu.Lock()
		e.allowed += a
		e.mu.Unlock()
		last2[0], last2[1] = last2[1], a
		select {
		case <-ctx.Done():
			_ = s.CloseSend()
			select {
			case <-broken:
			case <-time.After(15 * time.Second):
			}
			return
		case <-broken:
			return
		case <-time.After(e.Interval):
		}
	}
}

// take applies one response's actions.
func (e *Envoy) take(resp *rlqsv3.RateLimitQuotaResponse) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range resp.GetBucketAction() {
		if qa := a.GetQuotaAssignmentAction(); qa != nil {
			e.rate = Rate(qa.GetRateLimitStrategy())
			// Envoy reads the TTL's whole seconds.
			e.expires = time.Now().Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
			e.got = time.Now()
		} else if a.GetAbandonAction() != nil {
			e.rate, e.abandons = -1, e.abandons+1
		}
	}
}

// Rate is the rate per second Envoy enforces for a strategy, as Envoy's
// rate_limit_quota filter reads it: a token bucket's tokens per fill over
// the whole seconds of its fill interval (a fill under a second divides
// by zero: no limit), 0 for DENY_ALL, +Inf for ALLOW_ALL, and -1 (no
// assignment) for requests_per_time_unit, which Envoy does not implement.
func Rate(s *typev3.RateLimitStrategy) float64 {
	if tb := s.GetTokenBucket(); tb != nil {
		secs := tb.GetFillInterval().GetSeconds()
		if secs <= 0 {
			return math.Inf(1)
		}
		return float64(tb.GetTokensPerFill().GetValue()) / float64(secs)
	}
	if s.GetRequestsPerTimeUnit() != nil {
		return -1
	}
	if s.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL {
		return math.Inf(1)
	}
	return 0
}
