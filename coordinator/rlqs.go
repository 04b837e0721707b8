package coordinator

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
// no_assignment_behavior; its usage is still billed under the rule it
// names, if any. docs/gateways.md has the Envoy configuration.

// Bounds on what one stream may hold.
const (
	// maxQuotaBuckets bounds the buckets one stream may report.
	maxQuotaBuckets = 10_000
	// maxBucketEntries bounds the entries of one bucket id.
	maxBucketEntries = 16
)

type rlqsServer struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	c *Coordinator
}

// StreamRateLimitQuotas serves one Envoy.
func (s *rlqsServer) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	c := s.c
	ctx := stream.Context()
	q := newQuotaStream(c)
	c.fsm.read(func(st *state) { q.rulesVersion = st.rules.Version() })
	c.metrics.rlqsStreams.Inc()
	defer c.metrics.rlqsStreams.Dec()
	c.log.Debug("RLQS stream opened", "node", q.node)

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
	tick := time.NewTicker(c.settings().reportInterval)
	defer tick.Stop()
	defer q.flush()
	for {
		select {
		case m := <-msgs:
			if err := q.absorb(m); err != nil {
				return err
			}
		case <-tick.C:
			if !q.due() {
				continue
			}
		case err := <-recvErr:
			c.log.Debug("RLQS stream closed", "node", q.node, "error", err)
			return nil
		case <-ctx.Done():
			return nil
		case <-c.draining:
			return status.Error(codes.Unavailable, "coordinator shutting down; reconnect")
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
	c           *Coordinator
	node        string
	incarnation uint64
	buckets     map[string]*quotaBucket
	seq         uint64
	pending     *allotpb.UsageBatch // sent, not yet acknowledged
	counts      map[usageCountKey]*allotpb.UsageCount
	last        time.Time // the last exchange
	// rulesVersion is the rule set the buckets are mapped under; ttl and
	// interval are the cluster's lease TTL and report interval.
	rulesVersion  uint64
	ttl, interval time.Duration
}

type usageCountKey struct {
	rule, tenant string
	window       int64
}

// quotaBucket is one bucket and the lease behind its assignment.
type quotaBucket struct {
	id              *rlqsv3.BucketId
	rule, key       string
	tenant, plan    string
	allowed, denied uint64 // since the last exchange
	lease           *allotpb.Lease
	expiresAt       time.Time
	sent            string    // the assignment last sent, as text
	sentExpires     time.Time // when Envoy's copy of it expires

	// Window rules: what Envoy admitted in the rule's current window.
	windowed  bool
	period    time.Duration
	window    time.Time
	committed uint64
}

func newQuotaStream(c *Coordinator) *quotaStream {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &quotaStream{
		c: c, node: "rlqs-" + hex.EncodeToString(b[:4]), incarnation: binary.LittleEndian.Uint64(b[:]) | 1,
		buckets: map[string]*quotaBucket{}, counts: map[usageCountKey]*allotpb.UsageCount{}, last: c.now(),
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

// absorb takes one usage report. A malformed report ends the stream with
// INVALID_ARGUMENT; a bucket that maps to no rule is kept, so that its
// next report is not mistaken for a new bucket, but gets no assignment.
func (q *quotaStream) absorb(m *rlqsv3.RateLimitQuotaUsageReports) error {
	if len(m.GetBucketQuotaUsages()) > maxQuotaBuckets {
		return status.Errorf(codes.InvalidArgument, "bucket_quota_usages: %d buckets; at most %d", len(m.GetBucketQuotaUsages()), maxQuotaBuckets)
	}
	var set *rules.Set
	q.c.fsm.read(func(st *state) { set = st.rules })
	window := q.c.settings().billingWindow
	now := q.c.now()
	for i, u := range m.GetBucketQuotaUsages() {
		id := u.GetBucketId()
		if len(id.GetBucket()) == 0 || len(id.GetBucket()) > maxBucketEntries {
			return status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].bucket_id: must have 1–%d entries", i, maxBucketEntries)
		}
		for k, v := range id.GetBucket() {
			if len(k) > allotpb.MaxNameLen || len(v) > allotpb.MaxNameLen {
				return status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].bucket_id: keys and values must be at most %d bytes", i, allotpb.MaxNameLen)
			}
		}
		if u.GetNumRequestsAllowed() > allotpb.MaxCost*1024 || u.GetNumRequestsDenied() > allotpb.MaxCost*1024 {
			return status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d]: request counts beyond %d", i, uint64(allotpb.MaxCost*1024))
		}
		name := bucketName(id)
		b := q.buckets[name]
		if b == nil {
			if len(q.buckets) >= maxQuotaBuckets {
				return status.Errorf(codes.ResourceExhausted, "this stream reports more than %d buckets", maxQuotaBuckets)
			}
			b = &quotaBucket{id: id}
			b.map_(set)
			q.buckets[name] = b
		}
		// Usage is billed under the rule the bucket names even while this
		// member does not know it: it may be catching up after a restart,
		// or the rule may have been deleted after Envoy enforced it.
		billed := id.GetBucket()["rule"]
		if billed == "" {
			q.c.metrics.rlqsRequests.WithLabelValues("unmapped").Add(float64(u.GetNumRequestsAllowed() + u.GetNumRequestsDenied()))
			continue
		}
		if b.rule != "" {
			b.allowed += u.GetNumRequestsAllowed()
			b.denied += u.GetNumRequestsDenied()
			if b.windowed {
				if w := now.Truncate(b.period); !w.Equal(b.window) {
					b.window, b.committed = w, 0
				}
				b.committed += u.GetNumRequestsAllowed()
			}
		}
		if u.GetNumRequestsAllowed()+u.GetNumRequestsDenied() > 0 {
			k := usageCountKey{billed, b.tenant, now.Truncate(window).Unix()}
			uc := q.counts[k]
			if uc == nil {
				uc = &allotpb.UsageCount{Rule: billed, Tenant: b.tenant, WindowUnix: k.window}
				q.counts[k] = uc
			}
			uc.Admitted += u.GetNumRequestsAllowed()
			q.c.metrics.rlqsRequests.WithLabelValues("allowed").Add(float64(u.GetNumRequestsAllowed()))
			q.c.metrics.rlqsRequests.WithLabelValues("denied").Add(float64(u.GetNumRequestsDenied()))
			uc.Denied += u.GetNumRequestsDenied()
		}
	}
	return nil
}

// map_ finds a bucket's rule and key in set.
func (b *quotaBucket) map_(set *rules.Set) {
	m := b.id.GetBucket()
	b.rule, b.key, b.tenant, b.plan = "", "", m["tenant"], m["plan"]
	r, ok := set.Get(m["rule"])
	if !ok || r.Fair() || r.Local || r.Unlimited {
		return
	}
	var vals []string
	if r.Scope == rules.Descriptor {
		for _, e := range r.Match.Descriptors {
			vals = append(vals, m[e.Key])
		}
		b.key = string(rules.AppendDescriptorKey(nil, vals...))
	} else {
		for _, a := range r.KeyAttrs() {
			vals = append(vals, m[string(a)])
		}
		b.key = string(rules.AppendKey(nil, vals...))
	}
	b.rule = r.Name
	b.windowed, b.period = r.Algorithm.Windowed(), r.Period
}

// due reports whether a tick should exchange: Envoy has not reported for
// a whole interval, so leases must be renewed and its demand seen to fall.
func (q *quotaStream) due() bool {
	return q.c.now().Sub(q.last) >= q.c.settings().reportInterval
}
