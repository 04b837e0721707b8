package coordinator

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease/rules"
	allotpb "github.com/allot-io/allot/proto"
)

// exchange reports the stream's usage and demand as an agent would and
// turns the answer into bucket actions: a new assignment where the
// division changed or the last one nears its end, an abandon where the
// bucket's rule is gone. A report that fails is made again at the next
// exchange, its usage under the same sequence number, so the ledger counts
// it once.
func (q *quotaStream) exchange(ctx context.Context) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	var set *rules.Set
	q.c.fsm.read(func(st *state) { set = st.rules })
	var actions []*rlqsv3.RateLimitQuotaResponse_BucketAction
	if set.Version() != q.rulesVersion {
		actions = q.remap(set)
	}
	now := q.c.now()
	req := q.request(now, set.Version(), false)
	resp, err := q.send(ctx, req)
	if err != nil {
		q.c.log.Debug("RLQS report failed; it is made again at the next", "node", q.node, "error", err)
		return actions
	}
	q.settle(now, req, resp)
	return append(actions, q.assignments(now, set)...)
}

// request builds the report the stream's agent would send.
func (q *quotaStream) request(now time.Time, version uint64, leaving bool) *allotpb.ReportRequest {
	if q.pending == nil && len(q.counts) > 0 {
		q.seq++
		counts := slices.Collect(func(yield func(*allotpb.UsageCount) bool) {
			for _, uc := range q.counts {
				if !yield(uc) {
					return
				}
			}
		})
		q.pending = &allotpb.UsageBatch{Seq: q.seq, Counts: counts, CutUnixNano: now.UnixNano()}
		clear(q.counts)
	}
	req := &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: q.node, Incarnation: q.incarnation,
		Region: q.c.cfg.Region, SentUnixNano: now.UnixNano(), IntervalNano: max(now.Sub(q.last).Nanoseconds(), 1),
		RulesVersion: version, Usage: q.pending, Leaving: leaving,
	}
	for _, b := range q.buckets {
		if b.rule == "" {
			continue
		}
		d := &allotpb.KeyDemand{Rule: b.rule, Key: b.key, Tenant: b.tenant, Plan: b.plan, Admitted: float64(b.allowed), Denied: float64(b.denied)}
		if l := b.lease; l != nil && now.Before(b.expiresAt) && !leaving {
			d.Held, d.HeldEpoch, d.HeldSeq, d.NextHeld = l.GetLimit(), l.GetEpoch(), l.GetSeq(), l.GetNextLimit()
		}
		if b.windowed {
			d.Committed, d.WindowUnixNano = float64(b.committed), b.window.UnixNano()
		}
		req.Demand = append(req.Demand, d)
	}
	return req
}

// send makes a report on the leader: here, or forwarded to it with this
// member's own credentials (the leader accepts a member's report for any
// node).
func (q *quotaStream) send(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	c := q.c
	if c.leading.Load() {
		resp, err := c.report(ctx, req, false)
		if status.Code(err) != codes.Unavailable || c.leading.Load() {
			return resp, err
		}
	}
	_, addr := c.Leader()
	if addr == "" || addr == c.AdvertisedGRPCAddr() {
		return nil, errors.New("no leader elected yet")
	}
	c.metrics.forwardedCalls.Inc()
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return allotpb.NewAgentServiceClient(c.peers.conn(addr)).Report(fctx, req)
}

// settle takes in an answer: the acknowledged usage, the leases.
func (q *quotaStream) settle(now time.Time, req *allotpb.ReportRequest, resp *allotpb.ReportResponse) {
	q.last = now
	if q.pending != nil && resp.GetAckedSeq() >= q.pending.GetSeq() {
		q.pending = nil
	}
	q.ttl = time.Duration(resp.GetLeaseTtlNano())
	q.interval = time.Duration(resp.GetReportIntervalNano())
	type lk struct{ rule, key string }
	got := make(map[lk]*allotpb.Lease, len(resp.GetLeases()))
	for _, l := range resp.GetLeases() {
		got[lk{l.GetRule(), l.GetKey()}] = l
	}
	renew := time.Unix(0, resp.GetRenewUnixNano())
	for _, b := range q.buckets {
		b.allowed, b.denied = 0, 0
		if b.rule == "" {
			continue
		}
		if l := got[lk{b.rule, b.key}]; l != nil {
			b.lease, b.expiresAt = l, time.Unix(0, l.GetExpiresUnixNano())
		} else if b.lease != nil && renew.After(b.expiresAt) {
			b.expiresAt = renew
		}
	}
}

// assignments are the actions that change or renew what Envoy enforces.
func (q *quotaStream) assignments(now time.Time, set *rules.Set) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	var out []*rlqsv3.RateLimitQuotaResponse_BucketAction
	margin := 2 * max(q.interval, time.Second)
	for _, b := range q.buckets {
		if b.rule == "" || b.lease == nil || !now.Before(b.expiresAt) {
			continue
		}
		r, _ := set.Get(b.rule)
		strat := strategy(&r, b.lease)
		text := strat.String()
		if text == b.sent && now.Add(margin).Before(b.sentExpires) {
			continue
		}
		ttl := b.expiresAt.Sub(now)
		b.sent, b.sentExpires = text, b.expiresAt
		out = append(out, &rlqsv3.RateLimitQuotaResponse_BucketAction{
			BucketId: b.id,
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
				QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
					AssignmentTimeToLive: durationpb.New(ttl),
					RateLimitStrategy:    strat,
				},
			},
		})
	}
	return out
}

// remap maps every bucket again under a changed rule set, and abandons
// those whose rule is gone: Envoy drops them and falls back on its
// no_assignment_behavior until a rule applies again.
func (q *quotaStream) remap(set *rules.Set) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	q.rulesVersion = set.Version()
	var out []*rlqsv3.RateLimitQuotaResponse_BucketAction
	for name, b := range q.buckets {
		was := b.rule
		b.map_(set)
		if was == "" || b.rule != "" {
			continue
		}
		delete(q.buckets, name)
		out = append(out, &rlqsv3.RateLimitQuotaResponse_BucketAction{
			BucketId: b.id,
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
				AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
			},
		})
	}
	return out
}

// flush, when the stream ends, reports what it has not, as an agent
// leaving: its usage reaches the ledger and its leases are released at
// once. It tries for a few report intervals.
func (q *quotaStream) flush() {
	if q.pending == nil && len(q.counts) == 0 && len(q.buckets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		now := q.c.now()
		var version uint64
		q.c.fsm.read(func(st *state) { version = st.rules.Version() })
		req := q.request(now, version, true)
		resp, err := q.send(ctx, req)
		if err == nil && (q.pending == nil || resp.GetAckedSeq() >= q.pending.GetSeq()) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if q.pending != nil {
		q.c.log.Warn("an ended RLQS stream's usage could not be recorded", "node", q.node, "seq", q.pending.GetSeq())
	}
}

// strategy is the assignment a lease makes: requests per time unit for a
// window rule whose period is one unit, else a token bucket refilling at
// the lease's rate, a little at a time. A lease of nothing denies all.
func strategy(r *rules.Rule, l *allotpb.Lease) *typev3.RateLimitStrategy {
	limit := l.GetLimit()
	if !(limit > 0) || r.Period <= 0 {
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	}
	if r.Algorithm.Windowed() {
		if unit, ok := timeUnit(r.Period); ok {
			return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
				RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: uint64(math.Round(limit)), TimeUnit: unit},
			}}
		}
	}
	// Refill about every 100 ms, in whole tokens, at exactly the rate.
	perFill := max(math.Round(limit*float64(100*time.Millisecond)/float64(r.Period)), 1)
	perFill = min(perFill, math.MaxUint32)
	fill := time.Duration(float64(r.Period) * perFill / limit)
	burst := math.Ceil(l.GetBurst())
	if r.Algorithm != algo.TokenBucket && r.Algorithm != algo.GCRA {
		burst = math.Ceil(limit) // a window admits its whole count at once
	}
	maxTokens := min(max(burst, perFill, 1), math.MaxUint32)
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: uint32(maxTokens), TokensPerFill: wrapperspb.UInt32(uint32(perFill)), FillInterval: durationpb.New(max(fill, time.Millisecond)),
	}}}
}

// timeUnit is Envoy's name for a period of exactly one unit.
func timeUnit(p time.Duration) (typev3.RateLimitUnit, bool) {
	switch p {
	case time.Second:
		return typev3.RateLimitUnit_SECOND, true
	case time.Minute:
		return typev3.RateLimitUnit_MINUTE, true
	case time.Hour:
		return typev3.RateLimitUnit_HOUR, true
	case 24 * time.Hour:
		return typev3.RateLimitUnit_DAY, true
	}
	return 0, false
}
