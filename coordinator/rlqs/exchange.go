package rlqs

import (
	"context"
	"maps"
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
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// exchange reports the stream's usage and demand as an agent would and
// turns the answer into bucket actions: a new assignment where the
// division changed or Envoy's copy nears its end, an abandon where the
// bucket's rule is gone or Envoy has not used it for bucketIdleTTL. A report that fails is made again at the next
// exchange, its usage under the same sequence number, so the ledger counts
// it once; one the coordinators refuse as invalid is dropped, counted and
// logged, so that it cannot stop the stream's reporting for good.
func (q *quotaStream) exchange(ctx context.Context) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	set := q.s.cfg.Intake.Rules()
	now := q.s.now()
	actions := q.abandonIdle(now)
	if set.Version() != q.rulesVersion {
		actions = append(actions, q.remap(set)...)
	}
	q.tried = now
	req := q.request(now, set.Version(), false)
	resp, err := q.send(ctx, req)
	if err != nil {
		q.failed(err)
		return actions
	}
	q.settle(now, resp)
	return append(actions, q.assignments(now)...)
}

// failed notes a report that failed: a refused batch is dropped; failures
// that go on are logged.
func (q *quotaStream) failed(err error) {
	q.failures++
	if status.Code(err) == codes.InvalidArgument && q.pending != nil {
		var units uint64
		for _, uc := range q.pending.GetCounts() {
			units += uc.GetAdmitted() + uc.GetDenied()
		}
		q.s.cfg.Metrics.Requests.WithLabelValues("refused").Add(float64(units))
		q.s.cfg.Log.Warn("an RLQS stream's usage was refused by the coordinators; it is dropped so the stream can go on", "node", q.node, "seq", q.pending.GetSeq(), "units", units, "error", err)
		q.pending = nil
		return
	}
	if q.failures == 10 || q.failures%100 == 0 {
		q.s.cfg.Log.Warn("an RLQS stream's reports keep failing; they are retried", "node", q.node, "failures", q.failures, "error", err)
	}
}

// request builds the report the stream's agent would send. Each bucket's
// demand covers what Envoy's reports since the last exchange covered.
func (q *quotaStream) request(now time.Time, version uint64, leaving bool) *allotpb.ReportRequest {
	if q.pending == nil && len(q.counts) > 0 {
		q.seq++
		q.pending = &allotpb.UsageBatch{Seq: q.seq, Counts: slices.Collect(maps.Values(q.counts)), CutUnixNano: now.UnixNano()}
		clear(q.counts)
	}
	interval := max(now.Sub(q.last), time.Nanosecond)
	req := &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: q.node, Incarnation: q.incarnation,
		Region: q.s.cfg.Region, SentUnixNano: now.UnixNano(), IntervalNano: interval.Nanoseconds(),
		RulesVersion: version, Usage: q.pending, Leaving: leaving,
	}
	for _, b := range q.buckets {
		if b.rule == "" {
			continue
		}
		d := &allotpb.KeyDemand{Rule: b.rule, Key: b.key, Tenant: b.tenant, Plan: b.plan, Admitted: float64(b.allowed), Denied: float64(b.denied)}
		if b.elapsed > 0 && b.elapsed < interval {
			d.IntervalNano = b.elapsed.Nanoseconds()
		}
		if l := b.lease; l != nil && now.Before(b.expiresAt) && !leaving {
			d.Held, d.HeldEpoch, d.HeldSeq, d.NextHeld = l.GetLimit(), l.GetEpoch(), l.GetSeq(), l.GetNextLimit()
		}
		if b.def.Algorithm.Windowed() && !b.window.IsZero() {
			d.Committed, d.WindowUnixNano = float64(b.committed), b.window.UnixNano()
		}
		req.Demand = append(req.Demand, d)
	}
	return req
}

// send makes a report through the stream's reporter, taken at its first
// report.
func (q *quotaStream) send(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	if q.router == nil {
		q.router = q.s.cfg.Intake.Reporter()
	}
	return q.router.Report(ctx, req)
}

// settle takes in an answer: the acknowledged usage, the leases, and
// whether this member knows the leader's rules, so that usage held for a
// rule still unknown is known to be under no rule.
func (q *quotaStream) settle(now time.Time, resp *allotpb.ReportResponse) {
	q.last, q.failures, q.urgent, q.fresh = now, 0, false, false
	if q.pending != nil && resp.GetAckedSeq() >= q.pending.GetSeq() {
		q.pending = nil
	}
	if resp.GetRulesVersion() <= q.rulesVersion && len(q.held) > 0 {
		for k, uc := range q.held {
			q.s.cfg.Metrics.Requests.WithLabelValues("unmapped").Add(float64(uc.GetAdmitted() + uc.GetDenied()))
			delete(q.held, k)
		}
	}
	type lk struct{ rule, key string }
	got := make(map[lk]*allotpb.Lease, len(resp.GetLeases()))
	for _, l := range resp.GetLeases() {
		got[lk{l.GetRule(), l.GetKey()}] = l
	}
	renew := time.Unix(0, resp.GetRenewUnixNano())
	for _, b := range q.buckets {
		b.allowed, b.denied, b.elapsed = 0, 0, 0
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

// assignments are the actions that change or renew what Envoy enforces. A
// lease whose rate moved less than 2% from the assignment Envoy holds
// renews that assignment as it is: a changed assignment makes Envoy build
// a new bucket, full, so it is sent only when it matters.
func (q *quotaStream) assignments(now time.Time) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	var out []*rlqsv3.RateLimitQuotaResponse_BucketAction
	margin := 2*max(q.s.cfg.Intake.ReportInterval(), time.Second) + time.Second
	for _, b := range q.buckets {
		if b.rule == "" || b.lease == nil {
			continue
		}
		// Envoy reads whole seconds of the TTL.
		ttl := b.expiresAt.Sub(now).Truncate(time.Second)
		if ttl < time.Second {
			continue
		}
		a := newAssignment(&b.def, b.lease)
		changed := b.sent == nil || !b.sent.close(a)
		if !changed && now.Add(margin).Before(b.sentExpires) {
			continue
		}
		if !changed {
			a = b.sent
		}
		b.sent, b.sentExpires = a, now.Add(ttl)
		out = append(out, &rlqsv3.RateLimitQuotaResponse_BucketAction{
			BucketId: b.id,
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
				QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
					AssignmentTimeToLive: durationpb.New(ttl),
					RateLimitStrategy:    a.strategy(),
				},
			},
		})
	}
	return out
}

// abandonIdle abandons the buckets Envoy has reported no usage of for
// bucketIdleTTL: their leases lapse at the coordinators, and a request
// that needs one again makes Envoy report it afresh (its first requests
// meet the filter's no_assignment_behavior until the assignment comes,
// within an exchange).
func (q *quotaStream) abandonIdle(now time.Time) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	var out []*rlqsv3.RateLimitQuotaResponse_BucketAction
	for name, b := range q.buckets {
		if now.Sub(b.active) < bucketIdleTTL {
			continue
		}
		delete(q.buckets, name)
		out = append(out, abandon(b.id))
	}
	q.s.cfg.Metrics.Abandoned.WithLabelValues("idle").Add(float64(len(out)))
	return out
}

// abandon is the action that tells Envoy to drop a bucket.
func abandon(id *rlqsv3.BucketId) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

// remap maps every bucket again under a changed rule set, abandons those
// whose rule is gone (Envoy drops them and falls back on its
// no_assignment_behavior until a rule applies again), and bills the usage
// held for rules that are known now.
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
		out = append(out, abandon(b.id))
		q.s.cfg.Metrics.Abandoned.WithLabelValues("rule_gone").Inc()
	}
	for k, uc := range q.held {
		if _, ok := set.Get(k.rule); ok {
			addCount(q.counts, k, uc.GetAdmitted(), uc.GetDenied())
			delete(q.held, k)
		}
	}
	return out
}

// flush, when the stream ends, reports all it has not, the last report as
// an agent leaving: its usage reaches the ledger and its leases are
// released at once. It tries for ten seconds.
func (q *quotaStream) flush() {
	if q.pending == nil && len(q.counts) == 0 && len(q.held) == 0 && len(q.buckets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		set := q.s.cfg.Intake.Rules()
		if set.Version() != q.rulesVersion {
			q.remap(set)
		}
		now := q.s.now()
		resp, err := q.send(ctx, q.request(now, set.Version(), true))
		if err != nil {
			q.failed(err)
		} else {
			q.settle(now, resp)
			if q.pending == nil && len(q.counts) == 0 {
				return
			}
			continue // what came after the batch just acknowledged
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if q.pending != nil || len(q.counts) > 0 {
		q.s.cfg.Log.Warn("an ended RLQS stream's usage could not be recorded", "node", q.node, "seq", q.pending.GetSeq())
	}
}

// assignment is a token bucket as Envoy runs one: it reads whole seconds
// of the fill interval and divides the tokens per fill by them, so the
// interval is a whole number of seconds, at least one.
type assignment struct {
	deny            bool
	maxTokens, fill uint32
	every           time.Duration
	ratePerSecond   float64
}

// maxFill bounds the fill interval: a rate below one token in it is
// denied outright.
const maxFill = 24 * time.Hour

// newAssignment is the token bucket that enforces a lease: its rate as
// closely as whole tokens over whole seconds can (the best of intervals of
// 1 to 10 s, and of one token every so many seconds), and
// for a token bucket or GCRA rule the lease's burst. A window rule's count
// is enforced as its rate: Envoy has no window.
func newAssignment(r *rules.Rule, l *allotpb.Lease) *assignment {
	limit := l.GetLimit()
	if !(limit > 0) || r.Period <= 0 {
		return &assignment{deny: true}
	}
	rate := limit / r.Period.Seconds()
	if 1/rate > maxFill.Seconds() {
		return &assignment{deny: true}
	}
	a := &assignment{ratePerSecond: rate}
	best := math.Inf(1)
	try := func(tokens, secs float64) {
		tokens = math.Min(math.Max(tokens, 1), math.MaxUint32)
		if e := math.Abs(tokens/secs-rate) / rate; e < best-1e-12 {
			best, a.fill, a.every = e, uint32(tokens), time.Duration(secs)*time.Second
		}
	}
	for s := 1.0; s <= 10; s++ {
		try(math.Round(rate*s), s)
	}
	try(1, math.Max(math.Round(1/rate), 1)) // one token every so many seconds
	burst := float64(a.fill)
	if r.Algorithm == algo.TokenBucket || r.Algorithm == algo.GCRA {
		burst = math.Max(burst, math.Ceil(l.GetBurst()))
	}
	a.maxTokens = uint32(math.Min(burst, math.MaxUint32))
	return a
}

// close reports whether b enforces what a does, within 2% of its rate.
func (a *assignment) close(b *assignment) bool {
	if a.deny || b.deny {
		return a.deny == b.deny
	}
	return math.Abs(a.ratePerSecond-b.ratePerSecond) <= 0.02*b.ratePerSecond && a.maxTokens == b.maxTokens
}

// strategy is the assignment in Envoy's terms.
func (a *assignment) strategy() *typev3.RateLimitStrategy {
	if a.deny {
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: a.maxTokens, TokensPerFill: wrapperspb.UInt32(a.fill), FillInterval: durationpb.New(a.every),
	}}}
}
