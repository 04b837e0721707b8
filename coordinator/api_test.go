package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/testwait"

	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func putRules(t *testing.T, c *Coordinator, rs ...*allotpb.Rule) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := allotpb.NewRulesServiceClient(dial(t, c.GRPCAddr())).PutRules(ctx, &allotpb.PutRulesRequest{Rules: rs}); err != nil {
		t.Fatal(err)
	}
}

func demand(rule, key string, admitted, denied, held float64) *allotpb.KeyDemand {
	return &allotpb.KeyDemand{Rule: rule, Key: key, Tenant: key, Admitted: admitted, Denied: denied, Held: held}
}

// TestReportGrantsProportionalLeases: two nodes reporting demand for one
// key get leases in proportion to their demand, adding up to the limit.
func TestReportGrantsProportionalLeases(t *testing.T) {
	nodes := cluster(t, 1, nil)
	c := nodes[0]
	rate := &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second), Burst: 200, Intent: "capacity"}
	putRules(t, c, rate)
	a := newAgentSim(t, "gw-a", []string{c.GRPCAddr()})
	b := newAgentSim(t, "gw-b", []string{c.GRPCAddr()})
	ctx := context.Background()
	// Wait out learning mode, then report a steady 3:1 demand over the limit.
	testwait.For(t, 10*time.Second, "learning mode to end", func() bool { return !c.alloc.Learning(c.now().UnixNano()) })
	var la, lb *allotpb.Lease
	// Floors of ¼ of an even share (125 each), then the remaining 750 in
	// proportion to demand above the floor, 2875 : 875: 700 and 300. The
	// leases get there as rounds divide the pool and each node says it
	// holds what it was sent.
	testwait.For(t, 10*time.Second, "the leases to settle at 700 and 300", func() bool {
		// Each reports per 200 ms interval: a wants 3000/s, b 1000/s.
		ra, err := a.report(ctx, "", 0, []*allotpb.KeyDemand{demand("api", "acme", 300, 300, la.GetLimit())})
		if err != nil {
			t.Fatal(err)
		}
		rb, err := b.report(ctx, "", 0, []*allotpb.KeyDemand{demand("api", "acme", 100, 100, lb.GetLimit())})
		if err != nil {
			t.Fatal(err)
		}
		if len(ra.GetLeases()) > 0 {
			la = ra.GetLeases()[0]
		}
		if len(rb.GetLeases()) > 0 {
			lb = rb.GetLeases()[0]
		}
		return math.Abs(la.GetLimit()-700) <= 5 && math.Abs(lb.GetLimit()-300) <= 5
	})
	if math.Abs(la.GetBurst()+lb.GetBurst()-200) > 1 {
		t.Errorf("bursts %.1f + %.1f, want the rule's 200 shared", la.GetBurst(), lb.GetBurst())
	}
	if la.GetEpoch() == 0 || la.GetSeq() == 0 || la.GetExpiresUnixNano() <= time.Now().UnixNano() {
		t.Errorf("lease lacks epoch, seq or a future expiry: %v", la)
	}
}

// TestLearningModeAfterFailover: a new leader grants no node more than it
// reports holding, for one lease period.
func TestLearningModeAfterFailover(t *testing.T) {
	nodes := cluster(t, 3, func(c *Config) { c.LeaseTTL = 3 * time.Second })
	putRules(t, waitLeader(t, nodes), &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "gcra", Limit: 1000, Period: durationpb.New(time.Second), Intent: "capacity"})
	old := waitLeader(t, nodes)
	stop(old)
	var rest []*Coordinator
	for _, c := range nodes {
		if c != old {
			rest = append(rest, c)
		}
	}
	l := waitLeader(t, rest)
	if !l.alloc.Learning(l.now().UnixNano()) {
		t.Skip("the new leader's learning period passed before the test could report; machine too slow")
	}
	agent := newAgentSim(t, "gw-a", []string{l.GRPCAddr()})
	resp, err := agent.report(context.Background(), "", 0, []*allotpb.KeyDemand{demand("api", "acme", 500, 500, 120)})
	if err != nil {
		t.Fatal(err)
	}
	if ls := resp.GetLeases(); len(ls) != 1 || ls[0].GetLimit() > 120 {
		t.Fatalf("learning mode granted %v; want at most the 120 held", ls)
	}
	newcomer := newAgentSim(t, "gw-new", []string{l.GRPCAddr()})
	resp, err = newcomer.report(context.Background(), "", 0, []*allotpb.KeyDemand{demand("api", "acme", 500, 500, 0)})
	if err != nil {
		t.Fatal(err)
	}
	// A node holding nothing gets only the capacity rule's tolerance (3%)
	// over what the reporting nodes held: the new leader does not know
	// what else its predecessor granted.
	if ls := resp.GetLeases(); len(ls) == 1 && ls[0].GetLimit() > 0.03*120+1e-9 {
		t.Fatalf("learning mode granted a node holding nothing %v; want at most 3%% of the 120 held", ls)
	}
	if !l.Status().GetLearning() {
		t.Error("status does not show learning mode")
	}
}

// TestLeavingReleasesLeases: an agent shutting down cleanly frees its
// share for the others at once.
func TestLeavingReleasesLeases(t *testing.T) {
	c := cluster(t, 1, nil)[0]
	putRules(t, c, &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "gcra", Limit: 1000, Period: durationpb.New(time.Second), Intent: "capacity"})
	testwait.For(t, 10*time.Second, "learning mode to end", func() bool { return !c.alloc.Learning(c.now().UnixNano()) })
	a := newAgentSim(t, "gw-a", []string{c.GRPCAddr()})
	b := newAgentSim(t, "gw-b", []string{c.GRPCAddr()})
	ctx := context.Background()
	var held float64
	for i := 0; i < 5; i++ {
		a.report(ctx, "", 0, []*allotpb.KeyDemand{demand("api", "acme", 200, 200, 500)})
		resp, _ := b.report(ctx, "", 0, []*allotpb.KeyDemand{demand("api", "acme", 200, 200, held)})
		held = resp.GetLeases()[0].GetLimit()
	}
	client := allotpb.NewAgentServiceClient(dial(t, c.GRPCAddr()))
	if _, err := client.Report(ctx, &allotpb.ReportRequest{Node: "gw-a", Incarnation: a.incarnation, Leaving: true,
		Demand: []*allotpb.KeyDemand{demand("api", "acme", 0, 0, 0)}}); err != nil {
		t.Fatal(err)
	}
	// What gw-a held is kept for two report intervals (for a replacement
	// to be leased, in a deploy), then goes to gw-b.
	testwait.For(t, 10*time.Second, "gw-b to hold the whole limit after gw-a left", func() bool {
		resp, err := b.report(ctx, "", 0, []*allotpb.KeyDemand{demand("api", "acme", 200, 200, held)})
		if err != nil {
			return false
		}
		for _, l := range resp.GetLeases() {
			held = l.GetLimit()
		}
		return held >= 990
	})
}

// TestHTTPEndpoints checks /metrics, /healthz, /readyz, /v1/status and
// /v1/usage, and gRPC health checking and reflection.
func TestHTTPEndpoints(t *testing.T) {
	c := cluster(t, 1, nil)[0]
	agent := newAgentSim(t, "gw-1", []string{c.GRPCAddr()})
	for i := 0; i < 3; i++ {
		if _, err := agent.report(context.Background(), "acme", 10, nil); err != nil {
			t.Fatal(err)
		}
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + c.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz: %d", code)
	}
	code, body := get("/metrics")
	for _, m := range []string{"allot_coordinator_raft_state", "allot_coordinator_reports_total", "allot_coordinator_raft_apply_duration_seconds", "allot_coordinator_learning_mode"} {
		if code != 200 || !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	code, body = get("/v1/status")
	var st map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st["state"] != "Leader" || st["leader_id"] != "n1" {
		t.Errorf("/v1/status: %d %s", code, body)
	}
	from := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)
	code, body = get("/v1/usage?tenant=acme&from=" + from)
	var usage struct {
		Records []struct {
			Admitted string `json:"admitted"`
		} `json:"records"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &usage) != nil || len(usage.Records) != 1 || usage.Records[0].Admitted != "30" {
		t.Errorf("/v1/usage: %d %s", code, body)
	}
	// Compact, whatever protojson's whitespace in this build: scripts and
	// the docs compare the bytes.
	if compact := new(bytes.Buffer); json.Compact(compact, []byte(body)) != nil || compact.String()+"\n" != body {
		t.Errorf("/v1/usage is not compact JSON: %q", body)
	}
	if code, body := get("/v1/usage?from=yesterday"); code != 400 || !strings.Contains(body, "from") {
		t.Errorf("bad query: %d %s", code, body)
	}

	cc := dial(t, c.GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("grpc health: %v %v", h, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	r, err := stream.Recv()
	if err != nil || !strings.Contains(r.String(), "allot.v1.AgentService") {
		t.Errorf("reflection: %v %v", r, err)
	}
}

// TestUsagePagination pages through the ledger.
func TestUsagePagination(t *testing.T) {
	c := cluster(t, 1, nil)[0]
	agent := newAgentSim(t, "gw-1", []string{c.GRPCAddr()})
	for i := 0; i < 25; i++ {
		if _, err := agent.report(context.Background(), "tenant-"+string(rune('a'+i)), 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	client := allotpb.NewUsageServiceClient(dial(t, c.GRPCAddr()))
	seen := map[string]bool{}
	tok := ""
	for pages := 0; ; pages++ {
		resp, err := client.QueryUsage(context.Background(), &allotpb.UsageQuery{PageSize: 10, PageToken: tok, From: timestamppb.New(time.Now().Add(-time.Hour))})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetRecords() {
			if seen[r.GetTenant()] {
				t.Fatalf("tenant %s on two pages", r.GetTenant())
			}
			seen[r.GetTenant()] = true
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			break
		}
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
	}
	if len(seen) != 25 {
		t.Fatalf("paged %d tenants, want 25", len(seen))
	}
	if _, err := client.QueryUsage(context.Background(), &allotpb.UsageQuery{PageToken: "garbage!"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad page token: %v", err)
	}
}

// TestConfigErrors checks that a bad configuration names its field.
func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		mod   func(*Config)
		field string
	}{
		{func(c *Config) { c.NodeID = "" }, "NodeID"},
		{func(c *Config) { c.DataDir = "" }, "DataDir"},
		{func(c *Config) { c.Join = []string{"x:1"} }, "Join"},
		{func(c *Config) { c.LeaseTTL = 100 * time.Millisecond }, "LeaseTTL"},
		{func(c *Config) { c.TLS.CertFile = "c.pem" }, "TLS"},
		{func(c *Config) { c.BillingWindow = time.Millisecond }, "BillingWindow"},
		{func(c *Config) { c.ApplyWindow = -1 }, "ApplyWindow"},
		// Secure by default: beyond loopback, credentials or a flag
		// saying why not. Refused before anything listens.
		{func(c *Config) { c.GRPCAddr, c.AdvertiseHost = "10.1.2.3:7400", "10.1.2.3" }, "--insecure"},
		{func(c *Config) { c.HTTPAddr = "0.0.0.0:7500" }, "--insecure"},
		{func(c *Config) { c.AdminToken, c.RaftAddr = "tok", "10.1.2.3:7300" }, "--raft-private-network"},
		{func(c *Config) {
			c.AuthTokensFile, c.GRPCAddr, c.RaftPrivateNetwork = "tokens.yaml", "10.1.2.3:7400", true
		}, "in the clear"},
		{func(c *Config) { c.AuthTokensFile = filepath.Join(t.TempDir(), "missing.yaml") }, "AuthTokensFile"},
		{func(c *Config) { c.TokenFile = filepath.Join(t.TempDir(), "missing.token") }, "TokenFile"},
		{func(c *Config) { c.MaxUnitsPerSecond = -1 }, "MaxUnitsPerSecond"},
	} {
		cfg := testConfig(t, "n1", t.TempDir())
		cfg.Bootstrap = true
		tt.mod(&cfg)
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("want an error naming %s, got %v", tt.field, err)
		}
	}
}

// TestBackupRestore backs up a cluster with usage and rules, restores the
// backup into a fresh cluster, and checks the ledger and rules are
// identical there.
func TestBackupRestore(t *testing.T) {
	src := cluster(t, 1, func(c *Config) { c.AdminToken = "tok" })[0]
	ctx := withToken(context.Background(), "tok")
	if _, err := allotpb.NewRulesServiceClient(dial(t, src.GRPCAddr())).PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{quotaRule}}); err != nil {
		t.Fatal(err)
	}
	agent := newAgentSim(t, "gw-1", []string{src.GRPCAddr()})
	for i := 0; i < 40; i++ {
		if _, err := agent.report(ctx, "tenant-"+string(rune('a'+i%6)), uint64(i+1), nil); err != nil {
			t.Fatal(err)
		}
	}
	var backup strings.Builder
	if _, err := BackupTo(context.Background(), allotpb.NewClusterServiceClient(dial(t, src.GRPCAddr())), &backup); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("backup without the token: %v", err)
	}
	if _, err := BackupTo(ctx, allotpb.NewClusterServiceClient(dial(t, src.GRPCAddr())), &backup); err != nil {
		t.Fatal(err)
	}
	dst := cluster(t, 3, func(c *Config) { c.AdminToken = "tok" })
	l := waitLeader(t, dst)
	dstClient := allotpb.NewClusterServiceClient(dial(t, l.GRPCAddr()))
	if _, err := RestoreFrom(ctx, dstClient, strings.NewReader("not a backup"), ""); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("restoring garbage: %v", err)
	}
	if _, err := RestoreFrom(ctx, dstClient, strings.NewReader(backup.String()), ""); err != nil {
		t.Fatal(err)
	}
	var want []string
	src.fsm.Read(func(s *state.State) { want = dumpLedger(s) })
	for _, c := range dst {
		testwait.For(t, 20*time.Second, c.ID()+" to hold the restored ledger", func() bool {
			var got []string
			c.fsm.Read(func(s *state.State) { got = dumpLedger(s) })
			return strings.Join(got, "\n") == strings.Join(want, "\n")
		})
		var n int
		c.fsm.Read(func(s *state.State) { n = s.Rules().Len() })
		if n != 1 {
			t.Errorf("%s: %d rules after restore", c.ID(), n)
		}
	}
	var srcEpoch, dstEpoch uint64
	src.fsm.Read(func(s *state.State) { srcEpoch = s.Epoch() })
	l.fsm.Read(func(s *state.State) { dstEpoch = s.Epoch() })
	if dstEpoch <= srcEpoch {
		t.Errorf("epoch after restore %d, not above the backup's %d", dstEpoch, srcEpoch)
	}
}
