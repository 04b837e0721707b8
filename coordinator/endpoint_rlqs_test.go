package coordinator

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/testwait"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot-io/allot/coordinator/rlqs/rlqstest"
	allotpb "github.com/allot-io/allot/proto"
)

var rlqsRule = &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "token_bucket", Limit: 300, Period: durationpb.New(time.Second), Intent: "capacity"}

// TestRLQSDividesByDemand: three Envoys with skewed demand on one bucket
// converge to shares proportional to demand that add up to the limit, a
// quiet one gives its share back, and every request they reported allowed
// is in the ledger exactly once.
func TestRLQSDividesByDemand(t *testing.T) {
	nodes := cluster(t, 1, nil)
	c := nodes[0]
	putRules(t, c, rlqsRule)
	bucket := map[string]string{"rule": "api", "tenant": "acme"}
	envoys := []*rlqstest.Envoy{
		rlqstest.New([]string{c.GRPCAddr()}, bucket, 300, plain),
		rlqstest.New([]string{c.GRPCAddr()}, bucket, 150, plain),
		rlqstest.New([]string{c.GRPCAddr()}, bucket, 50, plain),
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, e := range envoys {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(ctx) }()
	}
	within := func(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }
	// Proportional to demand, with a floor for the smallest (lease.Proportional).
	testwait.For(t, 20*time.Second, "shares proportional to demand (180, 90, 30)", func() bool {
		a, b, d := envoys[0].Assigned(), envoys[1].Assigned(), envoys[2].Assigned()
		return within(a, 180, 0.1) && within(b, 90, 0.1) && d >= 30 && d < b && a+b+d <= 300*1.05
	})
	t.Logf("assignments: %.0f %.0f %.0f", envoys[0].Assigned(), envoys[1].Assigned(), envoys[2].Assigned())

	envoys[0].SetDemand(0)
	testwait.For(t, 20*time.Second, "the quiet Envoy's share to go to the others", func() bool {
		return envoys[0].Assigned() < 30 && envoys[1].Assigned() > 150 && envoys[2].Assigned() >= 45
	})
	t.Logf("after the first went quiet: %.0f %.0f %.0f", envoys[0].Assigned(), envoys[1].Assigned(), envoys[2].Assigned())
	cancel()
	wg.Wait()

	var want uint64
	for _, e := range envoys {
		want += e.Reported()
	}
	testwait.For(t, 10*time.Second, "the ledger to hold every reported request", func() bool {
		got, _ := ledgerTotal(c.fsm, "acme")
		return got == want
	})
	if got, _ := ledgerTotal(c.fsm, "acme"); got != want {
		t.Fatalf("ledger %d, Envoys reported %d allowed", got, want)
	}
}

// TestRLQSFailover: Envoys on every member of a cluster keep their
// assignments across the leader's failover, reconnecting where their
// stream broke, and the assignments in force never add up to more than
// the limit: the old streams' leases are not granted again before they
// expire.
func TestRLQSFailover(t *testing.T) {
	nodes := cluster(t, 3, nil)
	putRules(t, leader(nodes), rlqsRule)
	bucket := map[string]string{"rule": "api", "tenant": "acme"}
	var envoys []*rlqstest.Envoy
	for i := range nodes {
		addrs := []string{nodes[i].GRPCAddr(), nodes[(i+1)%3].GRPCAddr(), nodes[(i+2)%3].GRPCAddr()}
		envoys = append(envoys, rlqstest.New(addrs, bucket, 200, plain))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, e := range envoys {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(ctx) }()
	}
	total := func() (sum float64, all bool) {
		all = true
		for _, e := range envoys {
			r := e.Assigned()
			if r < 0 {
				all = false
				continue
			}
			sum += r
		}
		return sum, all
	}
	testwait.For(t, 20*time.Second, "every Envoy to hold an even share", func() bool {
		sum, all := total()
		return all && sum > 250
	})
	var over float64
	watch := make(chan struct{})
	go func() {
		defer close(watch)
		for ctx.Err() == nil {
			if sum, _ := total(); sum > over {
				over = sum
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	old := leader(nodes)
	stop(old)
	var rest []*Coordinator
	for _, c := range nodes {
		if c != old {
			rest = append(rest, c)
		}
	}
	waitLeader(t, rest)
	failedOver := time.Now()
	testwait.For(t, 30*time.Second, "every Envoy to be assigned a share by the new leader", func() bool {
		for _, e := range envoys {
			if !e.LastAssignment().After(failedOver) {
				return false
			}
		}
		sum, all := total()
		return all && sum > 250
	})
	cancel()
	wg.Wait()
	<-watch
	if over > 300*1.05 {
		t.Fatalf("assignments in force added up to %.0f/s of a 300/s limit around the failover", over)
	}
	var want uint64
	for _, e := range envoys {
		want += e.Reported()
	}
	// Exactly once: the ledger holds every request a member received as
	// allowed. RLQS has no acknowledgement, so a report Envoy sent into the
	// stream of the member that stopped may never have been read: at most
	// one report interval of each Envoy whose stream broke.
	var received float64
	for _, c := range nodes {
		received += counterValue(t, c, "allot_coordinator_rlqs_requests_total", "result", "allowed")
	}
	for _, c := range rest {
		var got uint64
		testwait.For(t, 10*time.Second, c.ID()+"'s ledger to hold every request received", func() bool {
			got, _ = ledgerTotal(c.fsm, "acme")
			return float64(got) == received
		})
	}
	if lost := float64(want) - received; lost < 0 || lost > 300*0.2*1.5 {
		t.Fatalf("the Envoys reported %d allowed, the members received %.0f", want, received)
	}
	t.Logf("peak of assignments in force: %.0f/s; %d requests reported and ledgered", over, want)
}

var plain = grpc.WithTransportCredentials(insecure.NewCredentials())

// TestRLQSBuckets: a bucket naming no rule, or one the cluster does not
// have, gets no assignment and is not billed; usage under a rule deleted
// after Envoy enforced it still is; deleting a rule abandons its buckets;
// malformed buckets leave the stream and its other buckets working.
func TestRLQSBuckets(t *testing.T) {
	c := cluster(t, 1, nil)[0]
	putRules(t, c, rlqsRule)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	good := rlqstest.New([]string{c.GRPCAddr()}, map[string]string{"rule": "api", "tenant": "acme"}, 100, plain)
	unknown := rlqstest.New([]string{c.GRPCAddr()}, map[string]string{"rule": "nope", "tenant": "other"}, 100, plain)
	noRule := rlqstest.New([]string{c.GRPCAddr()}, map[string]string{"tenant": "acme"}, 100, plain)
	var wg sync.WaitGroup
	for _, e := range []*rlqstest.Envoy{good, unknown, noRule} {
		wg.Go(func() { _ = e.Run(ctx) })
	}
	testwait.For(t, 10*time.Second, "the mapped bucket's assignment", func() bool { return good.Assigned() > 0 })
	testwait.For(t, 10*time.Second, "the unmapped buckets' usage to be counted", func() bool {
		return counterValue(t, c, "allot_coordinator_rlqs_requests_total", "result", "unmapped") > 50
	})
	if unknown.Assigned() >= 0 || noRule.Assigned() >= 0 {
		t.Fatalf("unmapped buckets were assigned %v and %v", unknown.Assigned(), noRule.Assigned())
	}
	if _, err := allotpb.NewRulesServiceClient(dial(t, c.GRPCAddr())).DeleteRule(ctx, &allotpb.DeleteRuleRequest{Name: "api"}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the deleted rule's bucket to be abandoned", func() bool { return good.Abandons() > 0 })
	cancel()
	wg.Wait()
	// What the good bucket reported before its rule was deleted is billed;
	// what came after, under no rule, is not; the bucket naming no rule
	// never is.
	if got, _ := ledgerTotal(c.fsm, "acme"); got == 0 || got > good.Reported() {
		t.Fatalf("acme's ledger %d; its bucket reported %d", got, good.Reported())
	}
	if got, _ := ledgerTotal(c.fsm, "other"); got != 0 {
		t.Fatalf("the unknown rule's ledger %d; want nothing billed", got)
	}

	// Malformed buckets from hostile headers beside good ones: the good
	// ones are assigned, and the stream goes on.
	putRules(t, c, rlqsRule)
	many := map[string]string{"rule": "api"}
	for i := range 20 {
		many[fmt.Sprint("k", i)] = "v"
	}
	usage := func(bucket map[string]string, allowed uint64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: bucket}, NumRequestsAllowed: allowed}
	}
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(dial(t, c.GRPCAddr())).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{}},
		usage(map[string]string{"rule": strings.Repeat("x", 300)}, 1),
		usage(many, 1),
		usage(map[string]string{"rule": "api", "tenant": strings.Repeat("t", 5000)}, math.MaxUint64),
		usage(map[string]string{"rule": "api", "tenant": "good"}, 1),
	}}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatalf("the stream ended: %v", err)
	}
	assigned := map[string]bool{}
	for _, a := range resp.GetBucketAction() {
		if a.GetQuotaAssignmentAction() != nil {
			assigned[a.GetBucketId().GetBucket()["tenant"]] = true
		}
	}
	if !assigned["good"] || len(assigned) != 2 {
		t.Fatalf("assigned %v; want the good bucket and the long tenant's", assigned)
	}
}

// TestRLQSSharesAgentsKeys: a bucket names its key as an agent does, so
// an Envoy and an agent enforcing one tenant's rule, with the same demand,
// share one allowance evenly.
func TestRLQSSharesAgentsKeys(t *testing.T) {
	c := cluster(t, 1, nil)[0]
	putRules(t, c, rlqsRule)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := rlqstest.New([]string{c.GRPCAddr()}, map[string]string{"rule": "api", "tenant": "acme"}, 400, plain)
	go func() { _ = e.Run(ctx) }()
	agent := allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr()))
	var held *allotpb.Lease
	var mu sync.Mutex
	go func() { // an agent offered 400/s, reporting every interval, admitting what its lease lets through
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			mu.Lock()
			d := &allotpb.KeyDemand{Rule: "api", Key: "acme", Tenant: "acme", Admitted: 80}
			if held != nil {
				d.Admitted = math.Min(80, held.GetLimit()*0.2)
				d.Denied = 80 - d.Admitted
				d.Held, d.HeldEpoch, d.HeldSeq = held.GetLimit(), held.GetEpoch(), held.GetSeq()
			}
			mu.Unlock()
			resp, err := agent.Report(ctx, &allotpb.ReportRequest{Protocol: 1, Node: "gw-1", Incarnation: 7, Region: "eu-west",
				SentUnixNano: time.Now().UnixNano(), IntervalNano: int64(200 * time.Millisecond), Demand: []*allotpb.KeyDemand{d}})
			if err != nil {
				continue
			}
			mu.Lock()
			for _, l := range resp.GetLeases() {
				held = l
			}
			mu.Unlock()
		}
	}()
	share := func() float64 { mu.Lock(); defer mu.Unlock(); return held.GetLimit() }
	testwait.For(t, 20*time.Second, "the Envoy and the agent to split 300/s evenly", func() bool {
		a, b := share(), e.Assigned()
		return math.Abs(a-150) < 25 && math.Abs(b-150) < 25 && a+b <= 300*1.05
	})
	t.Logf("agent %.0f/s, Envoy %.0f/s", share(), e.Assigned())
}
