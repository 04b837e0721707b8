package coordinator

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/internal/auth"
	allotpb "github.com/allot-io/allot/proto"
)

// Delivering threshold notices, on the leader. The state records each
// notice as the usage crossing its threshold is applied (state/notices.go);
// the leader posts the pending ones to Config.NoticeWebhook, oldest first,
// and proposes those the receiver acknowledged (a 2xx) as delivered; with
// a ledger sink, another loop stores them in its allot_notices and
// proposes them as stored. Delivery is at least once: a leader that
// posted a notice and lost leadership before the delivery was committed
// leaves it pending, and the next leader posts it again, with the same
// Idempotency-Key, which the receiver dedupes on. A post the receiver
// refuses (any answer but a 2xx; a redirect, which is never followed)
// leaves that notice for the next round and the round goes on, so that
// one notice the receiver cannot take holds up no other; a post that gets
// no answer within NoticeTimeout ends the round. After either the next
// round waits a capped exponential backoff with jitter. Nothing here
// holds a lock while it posts, and nothing else waits for it: reports,
// leases and the ledger's export go on whatever the receiver does.

// Defaults of the delivery.
const (
	DefaultNoticeTimeout    = 10 * time.Second
	DefaultNoticeBackoffMax = 30 * time.Second
	// noticeBackoffFirst is the first wait after a failure; each further
	// failure doubles it, up to NoticeBackoffMax.
	noticeBackoffFirst = 500 * time.Millisecond
	// noticeInterval is how often the leader looks for pending notices
	// when none wait.
	noticeInterval = time.Second
	// noticeBatch bounds the notices one round posts before it proposes
	// them delivered.
	noticeBatch = 100
	// maxSecretLen bounds the secret file read.
	maxSecretLen = 64 << 10
)

// Headers of a notice's post.
const (
	// NoticeSignatureHeader holds "sha256=" and the hex HMAC-SHA256 of the
	// body under the shared secret.
	NoticeSignatureHeader = "Allot-Signature"
	// NoticeKeyHeader holds the notice's idempotency key.
	NoticeKeyHeader = "Idempotency-Key"
)

// noticeDefaults checks the notice settings and reads the secret: a
// webhook that is not an http(s) URL, or a secret file that is missing,
// empty or readable by other users, is refused before the member starts.
func (c *Config) noticeDefaults() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	if c.NoticeTimeout == 0 {
		c.NoticeTimeout = DefaultNoticeTimeout
	}
	if c.NoticeBackoffMax == 0 {
		c.NoticeBackoffMax = DefaultNoticeBackoffMax
	}
	if c.NoticeTimeout < 0 || c.NoticeBackoffMax < 0 {
		return bad("NoticeTimeout", "the notice timeout and backoff must be positive (got %v, %v)", c.NoticeTimeout, c.NoticeBackoffMax)
	}
	if c.NoticeWebhook == "" {
		if c.NoticeSecretFile != "" {
			return bad("NoticeSecretFile", "is set without a webhook to sign posts to (--notice-webhook)")
		}
		return nil
	}
	u, err := url.Parse(c.NoticeWebhook)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return bad("NoticeWebhook", "%q is not an http:// or https:// URL with a host (and no user:password: the secret file signs the posts)", c.NoticeWebhook)
	}
	if c.NoticeSecretFile == "" {
		return bad("NoticeSecretFile", "is required with a webhook: every post is signed with the secret it holds")
	}
	secret, err := readNoticeSecret(c.NoticeSecretFile)
	if err != nil {
		return bad("NoticeSecretFile", "%v", err)
	}
	c.noticeSecret = secret
	return nil
}

// readNoticeSecret reads the shared secret: the file's contents, a final
// newline aside.
func readNoticeSecret(path string) ([]byte, error) {
	mode, who, err := auth.SecretExposure(path)
	if err != nil {
		return nil, err
	}
	if who != "" {
		return nil, fmt.Errorf("%s is readable by %s (mode %04o): make it the service user's alone (chmod 600, or 640 with the service's own group)", path, who, mode)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretLen+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(b) > maxSecretLen {
		return nil, fmt.Errorf("%s holds more than %d bytes: not a secret", path, maxSecretLen)
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("%s is empty: it must hold the secret the receiver checks signatures with", path)
	}
	return b, nil
}

// NoticeBody is a notice's post body, as JSON.
type NoticeBody struct {
	Key        string    `json:"key"`
	Tenant     string    `json:"tenant"`
	Rule       string    `json:"rule"`
	CycleStart time.Time `json:"cycle_start"`
	CycleEnd   time.Time `json:"cycle_end"`
	Threshold  float64   `json:"threshold"`
	Limit      int64     `json:"limit"`
	Used       uint64    `json:"used"`
	CrossedAt  time.Time `json:"crossed_at"`
}

func noticeBody(n *allotpb.Notice) NoticeBody {
	return NoticeBody{
		Key: n.GetKey(), Tenant: n.GetTenant(), Rule: n.GetRule(),
		CycleStart: time.Unix(n.GetCycleStartUnix(), 0).UTC(), CycleEnd: time.Unix(n.GetCycleEndUnix(), 0).UTC(),
		Threshold: n.GetThreshold(), Limit: n.GetLimit(), Used: n.GetUsed(),
		CrossedAt: time.Unix(0, n.GetCrossedUnixNano()).UTC(),
	}
}

// SignNotice is the Allot-Signature header's value for a body.
func SignNotice(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// errNoticeRejected is a post the receiver answered, but not with a 2xx.
var errNoticeRejected = errors.New("the webhook did not accept the notice")

// noticeClient posts notices: each post bounded by NoticeTimeout, and
// redirects not followed (the answer to a post is the receiver's, not
// another server's).
func (c *Coordinator) noticeClient() *http.Client {
	return &http.Client{
		Timeout:       c.cfg.NoticeTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// postNotice posts one notice.
func (c *Coordinator) postNotice(ctx context.Context, client *http.Client, n *allotpb.Notice) error {
	body, err := json.Marshal(noticeBody(n))
	if err != nil {
		return fmt.Errorf("encoding notice %s: %w", n.GetKey(), err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.NoticeWebhook, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("notice %s: %w", n.GetKey(), err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "allot-coordinator")
	req.Header.Set(NoticeSignatureHeader, SignNotice(c.cfg.noticeSecret, body))
	req.Header.Set(NoticeKeyHeader, n.GetKey())
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("posting notice %s: %w", n.GetKey(), err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection is reused
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%w: notice %s: %s", errNoticeRejected, n.GetKey(), resp.Status)
	}
	return nil
}

// noticeTarget is where the leader delivers notices: the webhook or the
// ledger sink, each in a loop of its own, so that neither waits for the
// other.
type noticeTarget struct {
	// name is the target label of the metrics: webhook or sink.
	name string
	// sink says what a delivery records (NoticesDeliveredCommand.sink).
	sink bool
	// waiting counts the notices that wait for the target; done says
	// whether one was delivered to it.
	waiting func(*state.State) int
	done    func(*allotpb.Notice) bool
	// send delivers notices in order, and returns those it delivered
	// and the first failure.
	send func(ctx context.Context, ns []*allotpb.Notice) ([]*allotpb.Notice, error)
}

// webhookTarget posts notices to Config.NoticeWebhook, one at a time.
func (c *Coordinator) webhookTarget(client *http.Client) noticeTarget {
	return noticeTarget{
		name: "webhook", waiting: (*state.State).PendingNotices,
		done: func(n *allotpb.Notice) bool { return n.GetDeliveredUnixNano() != 0 },
		send: func(ctx context.Context, ns []*allotpb.Notice) ([]*allotpb.Notice, error) {
			var (
				sent  []*allotpb.Notice
				first error
			)
			for _, n := range ns {
				err := c.postNotice(ctx, client, n)
				if err == nil {
					sent = append(sent, n)
					continue
				}
				first = cmp.Or(first, err)
				if errors.Is(err, errNoticeRejected) {
					c.metrics.noticeDeliveries.WithLabelValues("webhook", "rejected").Inc()
					continue // the receiver answers: the next may be taken
				}
				c.metrics.noticeDeliveries.WithLabelValues("webhook", "failed").Inc()
				break
			}
			return sent, first
		},
	}
}

// sinkTarget stores notices in the ledger sink's allot_notices, a batch
// in one statement, once the schema is migrated.
func (c *Coordinator) sinkTarget() noticeTarget {
	migrated := false
	return noticeTarget{
		name: "sink", sink: true, waiting: (*state.State).UnstoredNotices,
		done: func(n *allotpb.Notice) bool { return n.GetStoredUnixNano() != 0 },
		send: func(ctx context.Context, ns []*allotpb.Notice) ([]*allotpb.Notice, error) {
			ctx, cancel := context.WithTimeout(ctx, c.cfg.ExportTimeout)
			defer cancel()
			fail := func(err error) ([]*allotpb.Notice, error) {
				c.metrics.noticeDeliveries.WithLabelValues("sink", "failed").Inc()
				return nil, err
			}
			if !migrated {
				if err := c.sink.Migrate(ctx); err != nil {
					return fail(fmt.Errorf("migrating the ledger sink's schema: %w", err))
				}
				migrated = true
			}
			var cluster string
			c.fsm.Read(func(s *state.State) { cluster = s.ClusterID() })
			rows := make([]ledgersink.Notice, len(ns))
			for i, n := range ns {
				b := noticeBody(n)
				rows[i] = ledgersink.Notice{
					Key: b.Key, Tenant: b.Tenant, Rule: b.Rule, CycleStart: b.CycleStart, CycleEnd: b.CycleEnd,
					Threshold: b.Threshold, Limit: b.Limit, Used: b.Used, CrossedAt: b.CrossedAt,
				}
			}
			if err := c.sink.WriteNotices(ctx, cluster, rows); err != nil {
				return fail(err)
			}
			return ns, nil
		},
	}
}

// deliverNotices delivers the notices waiting for target until ctx ends
// (leadership lost).
func (c *Coordinator) deliverNotices(ctx context.Context, target noticeTarget) {
	pending := c.metrics.noticesPending.WithLabelValues(target.name)
	defer pending.Set(0) // leader-only: another member delivers now
	var (
		backoff time.Duration
		failing string
	)
	timer := c.cfg.Clock.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		n, err := c.noticeRound(ctx, target)
		wait := noticeInterval
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			backoff = min(max(2*backoff, noticeBackoffFirst), c.cfg.NoticeBackoffMax)
			// Jitter over the upper half: members that fail together do
			// not retry together.
			wait = backoff/2 + rand.N(backoff/2+1)
			if msg := err.Error(); msg != failing {
				c.log.Warn("threshold notices not delivered; retrying", "target", target.name, "error", err, "retry_in", wait)
				failing = msg
			}
		default:
			if failing != "" {
				c.log.Info("threshold notices delivered again", "target", target.name)
			}
			backoff, failing = 0, ""
			if n == noticeBatch {
				wait = 0 // more wait
			}
		}
		timer.Reset(wait)
	}
}

// noticeRound delivers up to noticeBatch of the notices waiting for
// target, oldest first, proposes those delivered as such, and returns how
// many it tried and the first failure.
func (c *Coordinator) noticeRound(ctx context.Context, target noticeTarget) (int, error) {
	var waiting []*allotpb.Notice
	pending := c.metrics.noticesPending.WithLabelValues(target.name)
	c.fsm.Read(func(s *state.State) {
		pending.Set(float64(target.waiting(s)))
		if target.waiting(s) == 0 {
			return
		}
		s.EachNotice(false, func(n *allotpb.Notice) bool {
			if !target.done(n) {
				waiting = append(waiting, n)
			}
			return true
		})
	})
	slices.SortFunc(waiting, func(a, b *allotpb.Notice) int {
		return cmp.Or(cmp.Compare(a.GetCrossedUnixNano(), b.GetCrossedUnixNano()), strings.Compare(a.GetKey(), b.GetKey()))
	})
	waiting = waiting[:min(len(waiting), noticeBatch)]
	if len(waiting) == 0 {
		return 0, nil
	}
	sent, failed := target.send(ctx, waiting)
	c.metrics.noticeDeliveries.WithLabelValues(target.name, "delivered").Add(float64(len(sent)))
	if len(sent) > 0 {
		keys := make([]string, len(sent))
		for i, n := range sent {
			keys[i] = n.GetKey()
		}
		if _, err := c.apply(ctx, state.CmdNoticesDelivered|state.Ignorable, &fsmpb.NoticesDeliveredCommand{
			Keys: keys, NowUnixNano: c.now().UnixNano(), Sink: target.sink,
		}, 10*time.Second); err != nil {
			// Delivered and not recorded: the next round, or leader,
			// delivers them again under the same keys.
			return 0, fmt.Errorf("recording %d notices delivered: %w", len(sent), err)
		}
		c.fsm.Read(func(s *state.State) { pending.Set(float64(target.waiting(s))) })
	}
	return len(waiting), failed
}
