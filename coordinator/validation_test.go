package coordinator

import (
	"context"
	"errors"
	"github.com/allot-io/allot/internal/testwait"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/allocator"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// violations returns the fields a status's BadRequest names, in order.
func violations(st *status.Status) []string {
	var out []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				out = append(out, v.GetField())
			}
		}
	}
	return out
}

// TestReportListsEveryViolation: a report with several bad entries is
// refused with every one of them named by its index, so that the agent
// can drop exactly those and send the rest, which is then accepted.
func TestReportListsEveryViolation(t *testing.T) {
	c := cluster(t, 1, nil)[0]
	client := allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now()
	good := func(tenant string) *allotpb.UsageCount {
		return &allotpb.UsageCount{Rule: "plan-quota", Tenant: tenant, WindowUnix: now.Unix(), Admitted: 5}
	}
	bad := map[int]*allotpb.UsageCount{
		1: {Rule: "plan-quota", Tenant: strings.Repeat("x", allotpb.MaxNameLen+1), WindowUnix: now.Unix(), Admitted: 1},
		3: {Rule: "plan-quota", Tenant: "old", WindowUnix: now.Add(-DefaultLedgerRetention - 2*time.Hour).Unix(), Admitted: 1},
		4: {Rule: "plan-quota", Tenant: "ahead", WindowUnix: now.Add(2 * time.Hour).Unix(), Admitted: 1},
		5: {Rule: "plan-quota", Tenant: "huge", WindowUnix: now.Unix(), Denied: allotpb.MaxCount + 1},
		7: {Rule: "", Tenant: "no-rule", WindowUnix: now.Unix(), Admitted: 1},
	}
	var counts []*allotpb.UsageCount
	for i := 0; i < 9; i++ {
		if b := bad[i]; b != nil {
			counts = append(counts, b)
		} else {
			counts = append(counts, good("ok"))
		}
	}
	req := &allotpb.ReportRequest{
		Node: "gw-1", Incarnation: 1, IntervalNano: int64(time.Second), Region: "eu-west",
		Demand: []*allotpb.KeyDemand{{Rule: "r", Key: "k"}, {Rule: "r", Key: strings.Repeat("k", allotpb.MaxKeyLen+1)}},
		Usage:  &allotpb.UsageBatch{Seq: 1, Counts: counts},
	}
	_, err := client.Report(ctx, req)
	st := status.Convert(err)
	want := []string{"demand[1].key", "usage.counts[1].tenant", "usage.counts[3].window_unix", "usage.counts[4].window_unix", "usage.counts[5].denied", "usage.counts[7].rule"}
	if st.Code() != codes.InvalidArgument || !slices.Equal(violations(st), want) {
		t.Fatalf("got %v %q naming %v; want INVALID_ARGUMENT naming %v", st.Code(), st.Message(), violations(st), want)
	}
	if a, _ := ledgerTotal(c.fsm, "ok"); a != 0 {
		t.Fatalf("a refused report reached the ledger: %d", a)
	}
	// The agent drops what was named and sends the rest.
	req.Demand = req.Demand[:1]
	var kept []*allotpb.UsageCount
	for i, cnt := range counts {
		if bad[i] == nil {
			kept = append(kept, cnt)
		}
	}
	req.Usage.Counts = kept
	resp, err := client.Report(ctx, req)
	if err != nil {
		t.Fatalf("the report without the refused entries: %v", err)
	}
	if resp.GetAckedSeq() != 1 {
		t.Fatalf("acked %d", resp.GetAckedSeq())
	}
	if a, _ := ledgerTotal(c.fsm, "ok"); a != 5*uint64(len(kept)) {
		t.Fatalf("ledger %d; want %d", a, 5*len(kept))
	}
	testwait.For(t, 5*time.Second, "the refusal to be counted", func() bool {
		return counterValue(t, c, "allot_coordinator_reports_total", "result", "invalid") == 1
	})
}

// TestReportLimitsFollowRetention: the oldest billing window accepted is
// the oldest the retention keeps; with the ledger kept forever, it is
// MaxUsageAge old; an hour ahead of the clock is the newest.
func TestReportLimitsFollowRetention(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		retention time.Duration
		oldest    time.Time
	}{
		{48 * time.Hour, now.Add(-49 * time.Hour)},
		{KeepLedger, now.Add(-MaxUsageAge - time.Hour)},
	} {
		lim := allocator.ReportLimits(100, 0, tc.retention, time.Hour, now)
		if lim.MinWindowUnix != tc.oldest.Unix() || lim.MaxWindowUnix != now.Add(MaxClockAhead).Unix() || lim.MaxKeys != 100 {
			t.Errorf("retention %v: %+v; want windows from %d to %d", tc.retention, lim, tc.oldest.Unix(), now.Add(MaxClockAhead).Unix())
		}
	}
}

// TestConfigBillingWindow: a billing window is whole seconds, from a
// second to a day, and divides a day evenly.
func TestConfigBillingWindow(t *testing.T) {
	base := Config{NodeID: "n", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0"}
	for w, ok := range map[time.Duration]bool{
		0: true, time.Second: true, time.Minute: true, 90 * time.Minute: true, 24 * time.Hour: true,
		7 * time.Second: false, 1500 * time.Millisecond: false, 500 * time.Millisecond: false,
		25 * time.Hour: false, 48 * time.Hour: false, 7 * time.Hour: false,
	} {
		cfg := base
		cfg.BillingWindow = w
		_, err := cfg.withDefaults()
		if ok && err != nil {
			t.Errorf("billing window %v refused: %v", w, err)
		}
		if !ok && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "BillingWindow")) {
			t.Errorf("billing window %v: %v; want it refused", w, err)
		}
	}
}

// TestConfigLedgerRetention: zero means the finite default, a negative
// value keeps everything, and a retention shorter than the agent timeout
// is refused.
func TestConfigLedgerRetention(t *testing.T) {
	base := Config{NodeID: "n", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0"}
	cfg, err := base.withDefaults()
	if err != nil || cfg.LedgerRetention != DefaultLedgerRetention {
		t.Errorf("default retention %v, %v; want %v", cfg.LedgerRetention, err, DefaultLedgerRetention)
	}
	base.LedgerRetention = KeepLedger
	if cfg, err := base.withDefaults(); err != nil || cfg.LedgerRetention >= 0 {
		t.Errorf("keep-everything retention became %v, %v", cfg.LedgerRetention, err)
	}
	base.LedgerRetention = time.Minute
	if _, err := base.withDefaults(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a retention shorter than the agent timeout: %v", err)
	}
}

// TestReportRefusesABadKeyLimit: a report whose key demand carries a
// negative, or absurd, limit (or half of one) is refused whole with
// INVALID_ARGUMENT naming the field.
func TestReportRefusesABadKeyLimit(t *testing.T) {
	c := cluster(t, 1, nil)[0]
	client := allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		limit, period int64
		want          string
	}{
		{-1, int64(time.Minute), "demand[1].limit"},
		{1 << 62, int64(time.Minute), "demand[1].limit"},
		{20, 0, "demand[1].period_nano"},
		{20, 1 << 62, "demand[1].period_nano"},
	} {
		req := &allotpb.ReportRequest{Node: "gw-1", Incarnation: 1, IntervalNano: int64(time.Second), Region: "eu-west",
			Demand: []*allotpb.KeyDemand{{Rule: "r", Key: "ok"}, {Rule: "r", Key: "k", Limit: tc.limit, PeriodNano: tc.period}}}
		_, err := client.Report(ctx, req)
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !slices.Equal(violations(st), []string{tc.want}) {
			t.Errorf("limit %d per %d: got %v %q naming %v; want INVALID_ARGUMENT naming %s", tc.limit, tc.period, st.Code(), st.Message(), violations(st), tc.want)
		}
	}
}
