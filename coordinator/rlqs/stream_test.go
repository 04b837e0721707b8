package rlqs

import (
	"fmt"
	"math"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/rlqs/rlqstest"
	"github.com/allot-io/allot/internal/timeutil"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
)

var rlqsRule = &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "token_bucket", Limit: 300, Period: durationpb.New(time.Second), Intent: "capacity"}

// TestRLQSAssignment: a lease becomes the token bucket Envoy enforces at
// the lease's rate, in whole tokens over whole seconds.
func TestRLQSAssignment(t *testing.T) {
	for _, tc := range []struct {
		algorithm     string
		limit, burst  float64
		period        time.Duration
		wantRate      float64 // per second, as Envoy reads it
		tol           float64
		wantMaxTokens uint32
		deny          bool
	}{
		{"token_bucket", 300, 50, time.Second, 300, 0, 300, false},
		{"token_bucket", 300, 600, time.Second, 300, 0, 600, false},
		{"gcra", 7.5, 0, time.Second, 7.5, 0, 15, false},
		{"token_bucket", 0.3, 0, time.Second, 0.3, 0, 3, false},
		{"fixed_window", 1000, 0, time.Minute, 1000.0 / 60, 0.01, 0, false},
		{"sliding_window", 3, 0, time.Minute, 0.05, 0, 1, false},
		{"token_bucket", 1, 0, 48 * time.Hour, 0, 0, 0, true},
		{"token_bucket", 0, 0, time.Second, 0, 0, 0, true},
		{"token_bucket", 1e12, 0, time.Second, math.MaxUint32, 0, math.MaxUint32, false},
	} {
		r := rules.Rule{Algorithm: mustAlgorithm(t, tc.algorithm), Period: tc.period}
		a := newAssignment(&r, &allotpb.Lease{Limit: tc.limit, Burst: tc.burst})
		s := a.strategy()
		got := rlqstest.Rate(s)
		if tc.deny {
			if got != 0 {
				t.Errorf("%s %v per %v: rate %v, want DENY_ALL", tc.algorithm, tc.limit, tc.period, got)
			}
			continue
		}
		if math.Abs(got-tc.wantRate) > tc.tol*tc.wantRate+1e-9 {
			t.Errorf("%s %v per %v: Envoy enforces %v/s, want %v/s", tc.algorithm, tc.limit, tc.period, got, tc.wantRate)
		}
		if tb := s.GetTokenBucket(); tc.wantMaxTokens != 0 && tb.GetMaxTokens() != tc.wantMaxTokens {
			t.Errorf("%s %v per %v: max_tokens %d, want %d", tc.algorithm, tc.limit, tc.period, tb.GetMaxTokens(), tc.wantMaxTokens)
		}
		if tb := s.GetTokenBucket(); tb.GetFillInterval().GetNanos() != 0 || tb.GetFillInterval().GetSeconds() < 1 {
			t.Errorf("%s %v per %v: fill interval %v is no whole number of seconds", tc.algorithm, tc.limit, tc.period, tb.GetFillInterval().AsDuration())
		}
	}
}

func mustAlgorithm(t *testing.T, s string) algo.Algorithm {
	t.Helper()
	a, err := algo.ParseAlgorithm(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestRLQSAbandonsIdleBuckets: a stream abandons a bucket Envoy has
// reported no usage of for bucketIdleTTL, keeps one in use, and so a
// stream that has seen maxQuotaBuckets keys over its life still assigns a
// new one. Kept forever, the 5,001st key a long stream saw got no
// assignment at all (Envoy's no_assignment_behavior, often allow-all).
func TestRLQSAbandonsIdleBuckets(t *testing.T) {
	r, err := rulespb.FromProto(rlqsRule)
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.NewSet(1, []rules.Rule{r})
	if err != nil {
		t.Fatal(err)
	}
	clock := timeutil.NewManual(time.Unix(1_700_000_000, 0))
	abandoned := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "abandoned"}, []string{"reason"})
	s := New(Config{
		Intake: fixedIntake{set}, Clock: clock, Log: hclog.NewNullLogger(),
		Metrics: Metrics{
			Streams:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "streams"}),
			Requests:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests"}, []string{"result"}),
			Abandoned: abandoned,
		},
	})
	q := newQuotaStream(s, "edge")
	report := func(tenants ...string) {
		var us []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
		for _, tn := range tenants {
			us = append(us, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"rule": "api", "tenant": tn}}, NumRequestsAllowed: 1})
		}
		q.absorb(&rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: us})
	}
	var many []string
	for i := range maxQuotaBuckets {
		many = append(many, fmt.Sprint("t", i))
	}
	report(many...)
	if len(q.buckets) != maxQuotaBuckets {
		t.Fatalf("%d buckets, want %d", len(q.buckets), maxQuotaBuckets)
	}
	if b := q.bucket(&rlqsv3.BucketId{Bucket: map[string]string{"rule": "api", "tenant": "new"}}, set, clock.Now()); b != nil {
		t.Fatal("a bucket beyond maxQuotaBuckets was tracked")
	}
	report("t7") // t7 stays in use
	later := clock.Now().Add(bucketIdleTTL)
	q.buckets[bucketName(&rlqsv3.BucketId{Bucket: map[string]string{"rule": "api", "tenant": "t7"}})].active = later.Add(-time.Minute)
	actions := q.abandonIdle(later)
	if len(actions) != maxQuotaBuckets-1 || len(q.buckets) != 1 {
		t.Fatalf("abandoned %d, kept %d; want every idle bucket abandoned and t7 kept", len(actions), len(q.buckets))
	}
	for _, a := range actions {
		if a.GetAbandonAction() == nil || a.GetBucketId().GetBucket()["tenant"] == "t7" {
			t.Fatalf("action %v: want an abandon of an idle bucket", a)
		}
	}
	if b := q.bucket(&rlqsv3.BucketId{Bucket: map[string]string{"rule": "api", "tenant": "new"}}, set, later); b == nil || b.rule != "api" {
		t.Fatalf("a new key after the idle ones went: %+v; want it tracked and mapped", b)
	}
	if got := testutil.ToFloat64(abandoned.WithLabelValues("idle")); got != maxQuotaBuckets-1 {
		t.Fatalf("abandoned{reason=idle} %v, want %d", got, maxQuotaBuckets-1)
	}
}

// fixedIntake is a member holding one rule set, whose streams report
// nowhere: for the tests of what a stream does with Envoy's reports
// before it exchanges them.
type fixedIntake struct{ set *rules.Set }

func (i fixedIntake) Rules() *rules.Set           { return i.set }
func (fixedIntake) ReportInterval() time.Duration { return time.Second }
func (fixedIntake) BillingWindow() time.Duration  { return time.Hour }
func (fixedIntake) Reporter() Reporter            { return nil }
