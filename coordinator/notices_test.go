package coordinator

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/openapitest"
	"github.com/allot-io/allot/internal/pgserver/pgtest"
	"github.com/allot-io/allot/internal/testwait"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"
)

// noticeReceiver is a webhook receiver on a real listener that can go
// down (its listener closed: posts find nothing there) and come back on
// the same address. It checks each post's signature and counts the posts
// it acknowledged by idempotency key.
type noticeReceiver struct {
	t      *testing.T
	secret []byte
	addr   string

	mu     sync.Mutex
	srv    *http.Server
	acked  map[string]int
	bodies map[string]NoticeBody
	bad    []string
	status int // what it answers; 0 is 204
	// refuse, when set, is answered 400 for the keys ending in it.
	refuse string
	// hang, when set, holds every post until it is closed or the poster
	// gives up.
	hang chan struct{}
}

func newNoticeReceiver(t *testing.T, secret []byte) *noticeReceiver {
	r := &noticeReceiver{t: t, secret: secret, acked: map[string]int{}, bodies: map[string]NoticeBody{}}
	r.up()
	t.Cleanup(r.down)
	return r
}

func (r *noticeReceiver) url() string { return "http://" + r.addr + "/hooks/allot" }

func (r *noticeReceiver) up() {
	r.t.Helper()
	addr := r.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	testwait.For(r.t, 10*time.Second, "the receiver's address to be free again", func() bool {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err == nil
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(r.serve)}
	r.srv = srv
	go func() { _ = srv.Serve(ln) }()
}

func (r *noticeReceiver) down() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

func (r *noticeReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	r.mu.Lock()
	hang := r.hang
	r.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-req.Context().Done():
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := req.Header.Get(NoticeKeyHeader)
	var nb NoticeBody
	switch {
	case err != nil:
		r.bad = append(r.bad, "reading: "+err.Error())
	case !hmac.Equal([]byte(req.Header.Get(NoticeSignatureHeader)), []byte(SignNotice(r.secret, body))):
		r.bad = append(r.bad, key+": bad signature")
	case json.Unmarshal(body, &nb) != nil || nb.Key != key || req.Header.Get("Content-Type") != "application/json":
		r.bad = append(r.bad, key+": a body that is not the notice's: "+string(body))
	}
	if r.status != 0 {
		w.WriteHeader(r.status)
		return
	}
	if r.refuse != "" && strings.HasSuffix(key, r.refuse) {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.acked[key]++
	r.bodies[key] = nb
	w.WriteHeader(http.StatusNoContent)
}

func (r *noticeReceiver) answer(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = status
}

func (r *noticeReceiver) snapshot() (map[string]int, map[string]NoticeBody, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	acked, bodies := map[string]int{}, map[string]NoticeBody{}
	for k, v := range r.acked {
		acked[k] = v
	}
	for k, v := range r.bodies {
		bodies[k] = v
	}
	return acked, bodies, append([]string(nil), r.bad...)
}

func writeSecret(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notice.secret")
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

var noticeRule = &allotpb.Rule{Name: "plan-quota", Scope: "tenant", Algorithm: "fixed_window", Limit: 100,
	Period: durationpb.New(noticeCycle), Intent: "quota", Notices: []float64{0.5, 0.8, 1}}

// noticeCycle is the tests' rule period: long, so that no test run
// straddles two cycles.
const noticeCycle = 400 * 24 * time.Hour

// webhookCount is allot_coordinator_notice_deliveries_total of the
// webhook for result.
func webhookCount(t *testing.T, c *Coordinator, result string) float64 {
	t.Helper()
	mfs, err := c.gather.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "allot_coordinator_notice_deliveries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["target"] == "webhook" && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func pendingNotices(c *Coordinator) (pending int, all []*allotpb.Notice) {
	c.fsm.Read(func(s *state.State) {
		pending = s.PendingNotices()
		s.EachNotice(false, func(n *allotpb.Notice) bool { all = append(all, n); return true })
	})
	return pending, all
}

// TestNoticesDeliveredOnce: a 3-member cluster with a real agent client
// reporting over gRPC and a real receiver. Crossing 50% posts one signed
// notice; the receiver goes down, 80% is crossed and recorded, and the
// leader is stopped with it pending; the new leader records 100% and,
// when the receiver is back, delivers both. Each notice reaches the
// receiver once, under its own key, and every member holds them all
// delivered.
func TestNoticesDeliveredOnce(t *testing.T) {
	secret := "s3cret-shared\n"
	recv := newNoticeReceiver(t, []byte("s3cret-shared"))
	secretFile := writeSecret(t, secret, 0o600)
	nodes := cluster(t, 3, func(c *Config) {
		c.BillingWindow = time.Second
		c.NoticeWebhook, c.NoticeSecretFile = recv.url(), secretFile
		c.NoticeTimeout, c.NoticeBackoffMax = time.Second, 500*time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := allotpb.NewRulesServiceClient(dial(t, nodes[0].GRPCAddr())).PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{noticeRule}}); err != nil {
		t.Fatal(err)
	}
	addrs := []string{nodes[0].GRPCAddr(), nodes[1].GRPCAddr(), nodes[2].GRPCAddr()}
	agent := newAgentSim(t, "gw-1", addrs)
	send := func(admitted uint64) {
		t.Helper()
		before := agent.ackedTotal()
		testwait.For(t, 20*time.Second, "the usage to be acknowledged", func() bool {
			_, _ = agent.report(ctx, "acme", admitted, nil)
			return agent.ackedTotal() == before+admitted
		})
	}

	send(30)
	send(25) // 55: past 50%
	testwait.For(t, 20*time.Second, "the 50% notice to be delivered", func() bool {
		acked, _, _ := recv.snapshot()
		p, all := pendingNotices(waitLeader(t, nodes))
		return len(acked) == 1 && p == 0 && len(all) == 1
	})

	recv.down()
	send(30) // 85: past 80%
	old := waitLeader(t, nodes)
	testwait.For(t, 20*time.Second, "the 80% notice to be recorded and its delivery to fail", func() bool {
		p, _ := pendingNotices(old)
		return p == 1 && webhookCount(t, old, "failed") > 0
	})
	stop(old)
	var rest []*Coordinator
	for _, c := range nodes {
		if c != old {
			rest = append(rest, c)
		}
	}
	next := waitLeader(t, rest)
	send(20) // 105: past 100%
	testwait.For(t, 20*time.Second, "the new leader to record the 100% notice and fail to deliver it", func() bool {
		p, _ := pendingNotices(next)
		return p == 2 && webhookCount(t, next, "failed") > 0
	})
	recv.up()
	testwait.For(t, 30*time.Second, "every notice to be delivered", func() bool {
		acked, _, _ := recv.snapshot()
		p, _ := pendingNotices(next)
		return len(acked) == 3 && p == 0
	})

	acked, bodies, bad := recv.snapshot()
	if len(bad) > 0 {
		t.Fatalf("the receiver refused posts: %v", bad)
	}
	want := map[float64]uint64{0.5: 55, 0.8: 85, 1: 105}
	for key, n := range acked {
		b := bodies[key]
		if n != 1 {
			t.Errorf("%s acknowledged %d times, want once", key, n)
		}
		if b.Tenant != "acme" || b.Rule != "plan-quota" || b.Limit != 100 || b.Used != want[b.Threshold] ||
			b.CycleEnd.Sub(b.CycleStart) != noticeCycle || b.CycleStart.UnixNano()%int64(noticeCycle) != 0 || b.CrossedAt.IsZero() {
			t.Errorf("notice %s: %+v", key, b)
		}
		if key != state.NoticeKey("acme", "plan-quota", b.CycleStart.Unix(), b.Threshold) {
			t.Errorf("idempotency key %s is not the notice's", key)
		}
		delete(want, b.Threshold)
	}
	if len(want) != 0 {
		t.Errorf("no notice at %v", want)
	}
	for _, c := range rest {
		testwait.For(t, 10*time.Second, c.ID()+" to hold every notice delivered", func() bool {
			p, all := pendingNotices(c)
			return p == 0 && len(all) == 3
		})
	}
}

// TestNoticesRejectedAreRetried: a receiver that answers 4xx, redirects
// or does not answer in time has the notice posted again (a redirect is
// not followed), and the cluster goes on taking reports meanwhile; once
// it accepts, the notice is delivered once.
func TestNoticesRejectedAreRetried(t *testing.T) {
	recv := newNoticeReceiver(t, []byte("k"))
	nodes := cluster(t, 1, func(c *Config) {
		c.BillingWindow = time.Second
		c.NoticeWebhook, c.NoticeSecretFile = recv.url(), writeSecret(t, "k", 0o600)
		c.NoticeBackoffMax, c.NoticeTimeout = 200*time.Millisecond, 300*time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := allotpb.NewRulesServiceClient(dial(t, nodes[0].GRPCAddr())).PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{noticeRule}}); err != nil {
		t.Fatal(err)
	}
	agent := newAgentSim(t, "gw-1", []string{nodes[0].GRPCAddr()})
	reportTaken := func() {
		t.Helper()
		acked := agent.ackedTotal()
		testwait.For(t, 10*time.Second, "a report to be acknowledged", func() bool {
			_, _ = agent.report(ctx, "other", 1, nil)
			return agent.ackedTotal() > acked
		})
	}
	for _, status := range []int{http.StatusBadRequest, http.StatusTemporaryRedirect} {
		recv.answer(status)
		before := webhookCount(t, nodes[0], "rejected")
		if status == http.StatusBadRequest {
			testwait.For(t, 20*time.Second, "usage to cross 50%", func() bool {
				_, _ = agent.report(ctx, "acme", 60, nil)
				return agent.ackedTotal() >= 60
			})
		}
		testwait.For(t, 20*time.Second, "the notice to be rejected twice more", func() bool {
			return webhookCount(t, nodes[0], "rejected") >= before+2
		})
		reportTaken() // whatever the receiver answers
	}
	recv.answer(0)
	hang := make(chan struct{})
	recv.mu.Lock()
	recv.hang = hang
	recv.mu.Unlock()
	before := webhookCount(t, nodes[0], "failed")
	testwait.For(t, 20*time.Second, "posts to time out twice", func() bool {
		return webhookCount(t, nodes[0], "failed") >= before+2
	})
	reportTaken()
	recv.mu.Lock()
	recv.hang = nil
	recv.mu.Unlock()
	close(hang)
	testwait.For(t, 20*time.Second, "the notice to be delivered", func() bool {
		p, _ := pendingNotices(nodes[0])
		return p == 0
	})
	if acked, _, bad := recv.snapshot(); len(acked) != 1 || len(bad) > 0 {
		t.Fatalf("acknowledged %v, refused %v", acked, bad)
	}
	// GET /v1/notices answers as the OpenAPI description says.
	const path = "../docs/openapi/coordinator.json"
	docs, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, body := openapitest.Load(t, path, docs).Do(t, http.DefaultClient, "http://"+nodes[0].HTTPAddr(),
		openapitest.Case{Method: "GET", Path: "/v1/notices", Query: "tenant=acme", Status: 200})
	var page struct {
		Notices []struct {
			Key               string `json:"key"`
			DeliveredUnixNano string `json:"delivered_unix_nano"`
		} `json:"notices"`
	}
	if err := json.Unmarshal(body, &page); err != nil || len(page.Notices) != 1 || page.Notices[0].DeliveredUnixNano == "0" {
		t.Errorf("GET /v1/notices: %v: %s", err, body)
	}
}

// TestNoticesRefusedHoldUpNoOther: a notice the receiver keeps refusing
// does not hold up the ones after it, and is delivered once the receiver
// takes it.
func TestNoticesRefusedHoldUpNoOther(t *testing.T) {
	recv := newNoticeReceiver(t, []byte("k"))
	recv.mu.Lock()
	recv.refuse = "/0.5"
	recv.mu.Unlock()
	nodes := cluster(t, 1, func(c *Config) {
		c.BillingWindow = time.Second
		c.NoticeWebhook, c.NoticeSecretFile = recv.url(), writeSecret(t, "k", 0o600)
		c.NoticeBackoffMax = 200 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := allotpb.NewRulesServiceClient(dial(t, nodes[0].GRPCAddr())).PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{noticeRule}}); err != nil {
		t.Fatal(err)
	}
	agent := newAgentSim(t, "gw-1", []string{nodes[0].GRPCAddr()})
	testwait.For(t, 20*time.Second, "usage to cross 80%", func() bool {
		_, _ = agent.report(ctx, "acme", 85, nil)
		return agent.ackedTotal() >= 85
	})
	testwait.For(t, 20*time.Second, "the 80% notice delivered past the refused 50% one", func() bool {
		acked, _, _ := recv.snapshot()
		p, _ := pendingNotices(nodes[0])
		return len(acked) == 1 && p == 1 && webhookCount(t, nodes[0], "rejected") >= 2
	})
	if acked, _, _ := recv.snapshot(); acked[state.NoticeKey("acme", "plan-quota", time.Now().Unix()/int64(noticeCycle/time.Second)*int64(noticeCycle/time.Second), 0.8)] != 1 {
		t.Errorf("acknowledged %v, want the 80%% notice", acked)
	}
	recv.mu.Lock()
	recv.refuse = ""
	recv.mu.Unlock()
	testwait.For(t, 20*time.Second, "the 50% notice delivered", func() bool {
		acked, _, _ := recv.snapshot()
		p, _ := pendingNotices(nodes[0])
		return len(acked) == 2 && p == 0
	})
}

// TestNoticeConfigErrors: a webhook that is not http(s), or a secret file
// missing, empty or readable by every user, is refused at start-up with
// an error naming the setting.
func TestNoticeConfigErrors(t *testing.T) {
	good := writeSecret(t, "k", 0o600)
	for _, tc := range []struct {
		name          string
		webhook, file string
		want          string
	}{
		{"ftp", "ftp://hooks.example/allot", good, "not an http:// or https:// URL"},
		{"no scheme", "hooks.example/allot", good, "not an http:// or https:// URL"},
		{"no host", "https:///allot", good, "not an http:// or https:// URL"},
		{"user in the URL", "https://u:p@hooks.example/allot", good, "not an http:// or https:// URL"},
		{"no secret", "https://hooks.example/allot", "", "NoticeSecretFile: is required"},
		{"missing secret", "https://hooks.example/allot", filepath.Join(t.TempDir(), "missing"), "no such file"},
		{"empty secret", "https://hooks.example/allot", writeSecret(t, "\n", 0o600), "is empty"},
		{"world-readable secret", "https://hooks.example/allot", writeSecret(t, "k", 0o644), "readable by every user"},
		{"secret without a webhook", "", good, "without a webhook"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "n1", t.TempDir())
			cfg.Bootstrap = true
			cfg.NoticeWebhook, cfg.NoticeSecretFile = tc.webhook, tc.file
			_, err := New(cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want an ErrInvalidConfig saying %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(cfg.DataDir); len(entries) != 0 {
				t.Errorf("a refused configuration wrote to the data dir: %v", entries)
			}
		})
	}
}

// TestNoticesStoredInSink: with a ledger sink, notices are also stored in
// its allot_notices table, once each, whatever the webhook does: here it
// is down, and the notice waits for it while the sink has it.
func TestNoticesStoredInSink(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pgtest.CreateDatabase(t, pg)
	recv := newNoticeReceiver(t, []byte("k"))
	recv.down()
	c := cluster(t, 1, func(c *Config) {
		sinkConfig(dsn)(c)
		c.NoticeWebhook, c.NoticeSecretFile = recv.url(), writeSecret(t, "k", 0o600)
		c.NoticeBackoffMax = 200 * time.Millisecond
	})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := allotpb.NewRulesServiceClient(dial(t, c.GRPCAddr())).PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{noticeRule}}); err != nil {
		t.Fatal(err)
	}
	agent := newAgentSim(t, "gw-1", []string{c.GRPCAddr()})
	testwait.For(t, 20*time.Second, "usage to cross 50%", func() bool {
		_, _ = agent.report(ctx, "acme", 60, nil)
		return agent.ackedTotal() >= 60
	})
	testwait.For(t, 20*time.Second, "the notice stored, and still pending for the webhook", func() bool {
		var pending, unstored int
		c.fsm.Read(func(s *state.State) { pending, unstored = s.PendingNotices(), s.UnstoredNotices() })
		return pending == 1 && unstored == 0
	})
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var (
		key, cluster string
		used         int64
		threshold    float64
	)
	if err := conn.QueryRow(ctx, "SELECT key, cluster_id, used, threshold FROM allot_notices").Scan(&key, &cluster, &used, &threshold); err != nil {
		t.Fatal(err)
	}
	_, all := pendingNotices(c)
	if len(all) != 1 || key != all[0].GetKey() || cluster != c.Status().GetClusterId() || used != 60 || threshold != 0.5 {
		t.Errorf("stored %s of %s: used %d at %v; the cluster %s holds %v", key, cluster, used, threshold, c.Status().GetClusterId(), all)
	}
}
