package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/internal/testwait"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestNoticesList: allot notices list prints the notices a coordinator
// holds, and --pending only those its webhook has not acknowledged.
func TestNoticesList(t *testing.T) {
	var accept atomic.Bool
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if accept.Load() {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer hook.Close()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.New(coordinator.Config{
		NodeID: "c1", DataDir: t.TempDir(), Region: "eu", Bootstrap: true,
		RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		ReportInterval: 200 * time.Millisecond, ApplyWindow: 5 * time.Millisecond,
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		BillingWindow: time.Second, NoticeWebhook: hook.URL, NoticeSecretFile: secret, NoticeBackoffMax: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	testwait.For(t, 30*time.Second, "the coordinator to lead", c.IsLeader)
	cc, err := grpc.NewClient(c.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rule := &allotpb.Rule{Name: "plan-quota", Scope: "tenant", Algorithm: "fixed_window", Limit: 10,
		Period: durationpb.New(400 * 24 * time.Hour), Intent: "quota", Notices: []float64{0.5, 1}}
	if _, err := allotpb.NewRulesServiceClient(cc).PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{rule}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := allotpb.NewAgentServiceClient(cc).Report(ctx, &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: "gw-1", Incarnation: 1, Region: "eu",
		IntervalNano: int64(200 * time.Millisecond), SentUnixNano: now.UnixNano(),
		Usage: &allotpb.UsageBatch{Seq: 1, CutUnixNano: now.UnixNano(), Counts: []*allotpb.UsageCount{
			{Rule: "plan-quota", Tenant: "acme", WindowUnix: now.Unix(), Admitted: 6},
		}},
	}); err != nil {
		t.Fatal(err)
	}
	list := func(args ...string) (string, string) {
		t.Helper()
		var out, errs bytes.Buffer
		code := run(ctx, &env{args: append([]string{"notices", "list", "--coordinator", c.GRPCAddr()}, args...), stdout: &out, stderr: &errs, getenv: func(string) string { return "" }})
		if code != exitOK {
			t.Fatalf("allot notices list %v: exit %d: %s", args, code, errs.String())
		}
		return out.String(), errs.String()
	}
	testwait.For(t, 10*time.Second, "the 50% notice, pending", func() bool {
		out, _ := list("--pending")
		return strings.Contains(out, "acme") && strings.Contains(out, "50%") && strings.Contains(out, "pending")
	})
	if out, _ := list("--format", "jsonl", "--tenant", "acme"); !strings.Contains(out, `"key":"acme/plan-quota/`) || !strings.Contains(out, `"threshold":0.5`) {
		t.Errorf("jsonl: %s", out)
	}
	accept.Store(true)
	testwait.For(t, 10*time.Second, "the notice delivered", func() bool {
		out, _ := list("--pending")
		return strings.Contains(out, "no notices")
	})
	if out, _ := list(); !strings.Contains(out, "acme") || strings.Contains(out, "pending") {
		t.Errorf("after delivery: %s", out)
	}
	if _, errs := list("--pending", "--format", "jsonl"); !strings.Contains(errs, "no notices") {
		t.Errorf("jsonl with none: stderr %q", errs)
	}
}
