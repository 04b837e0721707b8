package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-io/allot/internal/timeutil"
	"github.com/allot-io/allot/lease/rules"
	allotpb "github.com/allot-io/allot/proto"
)

// RLQS: Envoy as an agent.
//
// Envoy's rate_limit_quota filter enforces, in each Envoy, an assignment
// per bucket that a server hands out over a stream, and reports each
// bucket's usage on that stream every reporting interval: the lease model
// Allot's own agents follow. So each stream is served as one more agent:
// its reports become Allot reports, made by the coordinator on the
// stream's behalf under a node name it draws for the stream, and go
// through the same validation, ledger batching (exactly once per report),
// demand estimate and allocator as every agent's; the leases that come
// back become assignments.
//
// A bucket maps to a rule and key by its bucket id's entries: "rule"
// names the rule; the rule's key attributes are read from entries of the
// same names ("tenant", "user", "route", "ip"), or, for a descriptor rule,
// from entries named as its descriptor keys; "tenant" and "plan" are
// billed and select plan limits. A bucket whose rule is unknown, global,
// or whose id is malformed gets no assignment: Envoy applies its
// no_assignment_behavior. Its usage is billed under the rule it names
// once the rule is known; docs/gateways.md has the Envoy configuration.
//
// Nothing an Envoy sends ends its stream: the values of a bucket id come
// from request headers, so a malformed or oversized bucket is left without
// an assignment rather than costing the Envoy every bucket's.

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

// rlqsIntake is what the RLQS front door needs of the member it runs on:
// the rules and settings its streams map and report by, and the way their
// reports go. Nothing else of the member is within its reach.
type rlqsIntake interface {
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
	Reporter() rlqsReporter
}

// rlqsReporter carries one stream's reports, in order.
type rlqsReporter interface {
	Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error)
}

// rlqsMetrics are the streams' metrics, registered by the member.
type rlqsMetrics struct {
	// Streams counts the streams open.
	Streams prometheus.Gauge
	// Requests counts the requests Envoys reported, by result: allowed,
	// denied, unmapped, refused.
	Requests *prometheus.CounterVec
	// Abandoned counts the buckets Envoys were told to abandon, by
	// reason: idle, rule_gone.
	Abandoned *prometheus.CounterVec
}

// rlqsConfig is what a front door serves with.
type rlqsConfig struct {
	Intake rlqsIntake
	// Region is the region the streams' reports are made in: the member's.
	Region  string
	Clock   timeutil.TimeSource
	Log     hclog.Logger
	Metrics rlqsMetrics
	// Caller names the credential a stream was opened with, "" for none:
	// the stream's node is named after it.
	Caller func(ctx context.Context) string
	// Draining is closed when the member begins to close: every stream
	// ends, so that the gRPC server can stop.
	Draining <-chan struct{}
}

// rlqsServer serves Envoys' RLQS streams.
type rlqsServer struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	cfg rlqsConfig
	// streams counts the streams served, for their bound.
	streams atomic.Int64
}

func newRLQSServer(cfg rlqsConfig) *rlqsServer { return &rlqsServer{cfg: cfg} }

func (s *rlqsServer) now() time.Time { return s.cfg.Clock.Now() }

// StreamRateLimitQuotas serves one Envoy.
func (s *rlqsServer) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
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

// quotaStream is one Envoy's stream seen as an agent.
type quotaStream struct {
	s           *rlqsServer
	node        string
	incarnation uint64
	buckets     map[string]*quotaBucket
	seq         uint64
	pending     *allotpb.UsageBatch // sent, not yet acknowledged
	counts      map[usageCountKey]*allotpb.UsageCount
	// held is usage under rules this member does not know yet: billed
	// once they are, dropped once the leader's rules are known here and
	// still lack them.
	held  map[usageCountKey]*allotpb.UsageCount
	last  time.Time // the last exchange that was answered
	tried time.Time // the last exchange tried
	// urgent is set when a new bucket waits for its first assignment,
	// fresh when usage came since the last exchange.
	urgent, fresh bool
	// rulesVersion is the rule set the buckets are mapped under.
	rulesVersion uint64
	failures     int // exchanges failed in a row
	// router carries the stream's reports (Intake.Reporter, taken at the
	// first report).
	router rlqsReporter
}

type usageCountKey struct {
	rule, tenant string
	window       int64
}

// quotaBucket is one bucket and the lease behind its assignment.
type quotaBucket struct {
	id              *rlqsv3.BucketId
	def             rules.Rule // the rule mapped to, when rule is set
	rule, key       string
	tenant, plan    string
	allowed, denied uint64        // since the last exchange
	elapsed         time.Duration // what Envoy's reports since then cover
	lease           *allotpb.Lease
	expiresAt       time.Time
	active          time.Time   // when Envoy last reported usage of it (or it was made)
	sent            *assignment // the assignment Envoy holds
	sentExpires     time.Time   // when Envoy's copy of it expires

	// Window rules: what Envoy admitted in the rule's current window.
	window    time.Time
	committed uint64
}

var nodeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// newQuotaStream names the stream's node after the credential that opened
// it, so that the ledger and logs say whose Envoy it was.
func newQuotaStream(s *rlqsServer, credential string) *quotaStream {
	var b [8]byte
	_, _ = rand.Read(b[:])
	who := nodeChars.ReplaceAllString(credential, "_")
	if len(who) > 64 {
		who = who[:64]
	}
	node := "rlqs-" + hex.EncodeToString(b[:4])
	if who != "" {
		node = "rlqs-" + who + "-" + hex.EncodeToString(b[:4])
	}
	return &quotaStream{
		s: s, node: node, incarnation: binary.LittleEndian.Uint64(b[:]) | 1,
		buckets: map[string]*quotaBucket{}, counts: map[usageCountKey]*allotpb.UsageCount{},
		held: map[usageCountKey]*allotpb.UsageCount{}, last: s.now(),
	}
}

// bucketName is a bucket id's entries in key order, for map keys.
func bucketName(id *rlqsv3.BucketId) string {
	m := id.GetBucket()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%d:%s=%d:%s;", len(k), k, len(m[k]), m[k])
	}
	return b.String()
}

// absorb takes one usage report: each bucket's demand, and its usage for
// the ledger.
func (q *quotaStream) absorb(m *rlqsv3.RateLimitQuotaUsageReports) {
	set := q.s.cfg.Intake.Rules()
	window := q.s.cfg.Intake.BillingWindow()
	now := q.s.now()
	for _, u := range m.GetBucketQuotaUsages() {
		allowed, denied := min(u.GetNumRequestsAllowed(), allotpb.MaxCount), min(u.GetNumRequestsDenied(), allotpb.MaxCount)
		q.s.cfg.Metrics.Requests.WithLabelValues("allowed").Add(float64(allowed))
		q.s.cfg.Metrics.Requests.WithLabelValues("denied").Add(float64(denied))
		ids := u.GetBucketId().GetBucket()
		ruleName := ids["rule"]
		if ruleName == "" || len(ruleName) > allotpb.MaxNameLen {
			q.s.cfg.Metrics.Requests.WithLabelValues("unmapped").Add(float64(allowed + denied))
			continue
		}
		tenant := allotpb.BoundName(ids["tenant"])
		if len(ids) <= maxBucketEntries {
			if b := q.bucket(u.GetBucketId(), set, now); b != nil && b.rule != "" {
				b.allowed += allowed
				b.denied += denied
				if allowed+denied > 0 {
					b.active = now
				}
				b.elapsed += min(max(u.GetTimeElapsed().AsDuration(), 0), time.Hour)
				if b.def.Algorithm.Windowed() {
					if w := now.Truncate(b.def.Period); !w.Equal(b.window) {
						b.window, b.committed = w, 0
					}
					b.committed += allowed
				}
			}
		}
		if allowed+denied == 0 {
			continue
		}
		q.fresh = true
		k := usageCountKey{ruleName, tenant, now.Truncate(window).Unix()}
		into := q.counts
		if _, known := set.Get(ruleName); !known {
			into = q.held
			if _, ok := into[k]; !ok && len(into) >= maxHeld {
				q.s.cfg.Metrics.Requests.WithLabelValues("unmapped").Add(float64(allowed + denied))
				continue
			}
		}
		addCount(into, k, allowed, denied)
	}
}

func addCount(into map[usageCountKey]*allotpb.UsageCount, k usageCountKey, allowed, denied uint64) {
	uc := into[k]
	if uc == nil {
		uc = &allotpb.UsageCount{Rule: k.rule, Tenant: k.tenant, WindowUnix: k.window}
		into[k] = uc
	}
	uc.Admitted = min(uc.Admitted+allowed, allotpb.MaxCount)
	uc.Denied = min(uc.Denied+denied, allotpb.MaxCount)
}

// bucket returns the bucket of an id, tracking it if there is room.
func (q *quotaStream) bucket(id *rlqsv3.BucketId, set *rules.Set, now time.Time) *quotaBucket {
	name := bucketName(id)
	b := q.buckets[name]
	if b == nil && len(q.buckets) < maxQuotaBuckets {
		b = &quotaBucket{id: id, active: now}
		b.map_(set)
		q.buckets[name] = b
		q.urgent = q.urgent || b.rule != ""
	}
	return b
}

// map_ finds a bucket's rule and key in set. A rule that changed, or a
// key that did, leaves nothing of the lease held under the old one.
func (b *quotaBucket) map_(set *rules.Set) {
	m := b.id.GetBucket()
	rule, key := "", ""
	r, ok := set.Get(m["rule"])
	if ok && !r.Fair() && !r.Local && !r.Unlimited {
		var vals []string
		if r.Scope == rules.Descriptor {
			for _, e := range r.Match.Descriptors {
				vals = append(vals, m[e.Key])
			}
			key = string(rules.AppendDescriptorKey(nil, vals...))
		} else {
			for _, a := range r.KeyAttrs() {
				vals = append(vals, m[string(a)])
			}
			key = string(rules.AppendKey(nil, vals...))
		}
		rule = r.Name
	}
	if rule != b.rule || key != b.key || (rule != "" && !rules.Equal(&r, &b.def)) {
		b.lease, b.expiresAt, b.sent, b.window, b.committed = nil, time.Time{}, nil, time.Time{}, 0
	}
	b.rule, b.key, b.def = rule, key, r
	b.tenant, b.plan = allotpb.BoundName(m["tenant"]), allotpb.BoundName(m["plan"])
}

// due reports whether to exchange now, at most once per minExchangeGap:
// usage came, to be in the ledger at once (RLQS has no acknowledgement,
// so what a member holds uncommitted is lost if it crashes); a new bucket
// waits for its first assignment; or an interval has passed since the
// last exchange answered, so leases need renewing.
func (q *quotaStream) due() bool {
	now := q.s.now()
	interval := q.s.cfg.Intake.ReportInterval()
	gap := minExchangeGap
	if q.failures > 0 { // retry as agents do, not at every report
		gap = max(interval/2, gap)
	}
	if now.Sub(q.tried) < gap {
		return false
	}
	return q.fresh || q.urgent || now.Sub(q.last) >= interval
}
