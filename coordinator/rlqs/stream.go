package rlqs

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// quotaStream is one Envoy's stream seen as an agent.
type quotaStream struct {
	s           *Server
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
	router Reporter
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
func newQuotaStream(s *Server, credential string) *quotaStream {
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
					if w := b.def.WindowStart(now); !w.Equal(b.window) {
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
