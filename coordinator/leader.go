package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/raft"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

// watchLeadership follows Raft's leadership notifications: on gaining
// leadership it prepares to serve (see lead), on losing it it stops the
// leader's work at once.
func (c *Coordinator) watchLeadership(ctx context.Context) {
	var leader leaderRun
	defer leader.stop()
	c.setStateMetric()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastLeader := ""
	var warned allocator.Settings // the cluster settings last compared with this member's flags
	for {
		select {
		case <-ctx.Done():
			return
		case isLeader := <-c.notify:
			leader.stop()
			c.leading.Store(false)
			c.metrics.learning.Set(0)
			if isLeader {
				leader.start(ctx, c.lead)
			}
			c.setStateMetric()
		case <-tick.C:
			c.setStateMetric()
			c.warnSettings(&warned)
			if _, id := c.raft.LeaderWithID(); string(id) != lastLeader {
				if lastLeader != "" || id != "" {
					c.metrics.leaderChanges.Inc()
					c.log.Info("leader changed", "leader", id)
				}
				lastLeader = string(id)
			}
		}
	}
}

// leaderRun is the leader's work during one term: started on gaining
// leadership, stopped on losing it.
type leaderRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *leaderRun) start(ctx context.Context, fn func(context.Context)) {
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		fn(ctx)
	}()
}

// stop ends the term's work and waits for it.
func (l *leaderRun) stop() {
	if l.cancel != nil {
		l.cancel()
		<-l.done
		l.cancel, l.done = nil, nil
	}
}

func (c *Coordinator) setStateMetric() {
	st := c.raft.State()
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if s == st {
			v = 1
		}
		c.metrics.raftState.WithLabelValues(s.String()).Set(v)
	}
	serving := healthpb.HealthCheckResponse_NOT_SERVING
	if id, _ := c.raft.LeaderWithID(); id != "" {
		serving = healthpb.HealthCheckResponse_SERVING
	}
	c.health.SetServingStatus("", serving)
}

// lead prepares a new leader and runs the leader's loops until ctx ends:
// it waits for the log to be applied, fixes cluster settings, records its
// own address, starts a new epoch, loads the rules file, then learns for
// one lease period while serving.
func (c *Coordinator) lead(ctx context.Context) {
	epoch, ok := c.prepareLead(ctx)
	if !ok {
		return // no longer the leader
	}
	if c.cfg.RulesFile != "" {
		if err := c.loadRulesFile(ctx); err != nil {
			c.log.Error("rules file not applied", "file", c.cfg.RulesFile, "error", err)
		}
	}
	// The cluster's settings, fixed above and unchanged for the term (a
	// restore resets the allocator with the backup's; see Restore).
	set, now := c.settings(), c.now()
	c.groups.ResetLoad(now.UnixNano())
	c.startTerm(epoch, now)
	c.leading.Store(true)
	defer func() {
		// Leader-only gauges: a member that lost leadership hears no
		// reports, and its last values would read as a second leader's.
		c.metrics.activeKeys.Set(0)
		c.metrics.activeAgents.Set(0)
		c.metrics.learning.Set(0)
	}()
	if c.alloc.Learning(now.UnixNano()) {
		c.metrics.learning.Set(1)
		c.log.Info("leading", "epoch", epoch, "learning_until", now.Add(set.LeaseTTL).Format(time.RFC3339Nano))
	} else {
		c.log.Info("leading", "epoch", epoch, "learning", false)
	}

	var grants *grantRecorder
	if c.parent != nil {
		grants = newGrantRecorder(epoch, now.UnixNano())
		c.goRun(func(context.Context) { c.reportToParent(ctx) })
		defer func() { // leader-only gauges: a follower holds no leases
			c.metrics.parentLeased.Set(0)
			c.metrics.parentFallback.Set(0)
		}()
	}
	if c.sink != nil {
		c.goRun(func(context.Context) { c.exportLedger(ctx) })
	}
	if c.cfg.NoticeWebhook != "" {
		c.goRun(func(context.Context) {
			client := c.noticeClient()
			defer client.CloseIdleConnections()
			c.deliverNotices(ctx, c.webhookTarget(client))
		})
	}
	if c.sink != nil {
		c.goRun(func(context.Context) { c.deliverNotices(ctx, c.sinkTarget()) })
	}
	if c.isHome() {
		c.goRun(func(context.Context) { c.groups.Move(ctx) })
	} else {
		c.goRun(func(context.Context) { c.groups.FollowHome(ctx, set.ReportInterval, c.mirrorHome) })
	}
	rounds := c.cfg.Clock.NewTicker(c.roundInterval(set))
	defer rounds.Stop()
	maintain := c.cfg.Clock.NewTicker(min(time.Minute, set.BillingWindow/4))
	defer maintain.Stop()
	defer c.alloc.Release() // reports waiting for a round that will not come
	defer c.roundsBehind.Store(false)
	for {
		select {
		case <-ctx.Done():
			return
		case <-rounds.C():
			now := c.now()
			start := time.Now()
			if c.parent != nil {
				// Leases from the parent that expired since the last round.
				c.alloc.RefreshLimits(now.UnixNano())
				leased, fallback := c.alloc.TierCounts(now.UnixNano())
				c.metrics.parentLeased.Set(float64(leased))
				c.metrics.parentFallback.Set(float64(fallback))
				c.recordGrants(grants, now.UnixNano(), set.BillingWindow, c.roundInterval(set))
			}
			active := c.alloc.Tick(now.UnixNano())
			took := time.Since(start)
			c.metrics.roundSeconds.Observe(took.Seconds())
			c.roundsBehind.Store(took > c.roundInterval(set))
			c.metrics.activeKeys.Set(float64(active))
			c.metrics.activeAgents.Set(float64(c.alloc.NodeCount(now.UnixNano())))
			if c.alloc.Learning(now.UnixNano()) {
				c.metrics.learning.Set(1)
			} else {
				c.metrics.learning.Set(0)
			}
		case <-maintain.C():
			if _, err := c.apply(ctx, state.CmdMaintain, &fsmpb.MaintainCommand{
				NowUnixNano: c.now().UnixNano(), AgentTimeoutNano: int64(c.cfg.AgentTimeout), RetentionNano: int64(max(c.cfg.LedgerRetention, 0)),
				AuditRetentionNano: int64(c.cfg.AuditRetention), AuditMaxEntries: uint64(c.cfg.AuditMaxEntries),
			}, 10*time.Second); err != nil {
				c.log.Warn("ledger maintenance failed", "error", err)
			}
			c.fsm.Read(func(s *state.State) { c.metrics.ledgerRecords.Set(float64(s.LedgerLen())) })
		}
	}
}

// Backoff between attempts at a leader's preamble.
const (
	leadRetryFirst = 250 * time.Millisecond
	leadRetryMax   = 10 * time.Second
)

// prepareLead runs the leader's preamble (preamble) until it succeeds,
// and returns the epoch it started, or false once ctx ends: the member is
// no longer the leader. A step that fails (a barrier or a command timing
// out on a slow disk or a lost quorum) is retried after a backoff: a
// member that stayed Raft's leader without ever serving would hold the
// cluster without a leader agents can use, and no election would follow.
func (c *Coordinator) prepareLead(ctx context.Context) (uint64, bool) {
	wait := leadRetryFirst
	for attempt := 1; ; attempt++ {
		epoch, step, err := c.preamble(ctx)
		if err == nil {
			return epoch, true
		}
		if ctx.Err() != nil {
			return 0, false
		}
		c.log.Warn("leader could not prepare to serve; retrying while it leads", "step", step, "attempt", attempt, "retry_in", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, false
		case <-t.C:
		}
		wait = min(2*wait, leadRetryMax)
	}
}

// preamble is what a new leader does before it serves: it waits for the
// log to be applied, fixes cluster settings, records its own addresses,
// forgets members no longer in the configuration, starts its shard group,
// and starts a new epoch, which it returns. Each step is idempotent, so a
// failed preamble is run again whole; it returns the step that failed.
func (c *Coordinator) preamble(ctx context.Context) (epoch uint64, step string, err error) {
	hook := func(step string) error {
		if h := c.cfg.hooks; h != nil && h.leadStep != nil {
			return h.leadStep(step)
		}
		return nil
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"catch up with the log", func() error { return waitFuture(ctx, c.raft.Barrier(10*time.Second)) }},
		{"fix cluster settings", c.fixSettings},
		{"record its addresses", func() error {
			var self *allotpb.Member
			c.fsm.Read(func(s *state.State) { self = s.Member(c.cfg.NodeID) })
			if me := c.selfMember(); self == nil || !proto.Equal(self, me) {
				_, err := c.apply(ctx, state.CmdMember, &fsmpb.MemberCommand{Member: me, Audit: c.selfStamp("Lead")}, 10*time.Second)
				return err
			}
			return nil
		}},
		{"forget members no longer in the configuration", c.pruneMembers},
		{"start its shard group owning no slot", c.groups.Start},
		{"start an epoch", func() error {
			res, err := c.apply(ctx, state.CmdEpoch, &fsmpb.EpochCommand{Leader: c.cfg.NodeID}, 10*time.Second)
			if err == nil {
				epoch = res.(uint64)
			}
			return err
		}},
	}
	for _, s := range steps {
		if err := hook(s.name); err != nil {
			return 0, s.name, err
		}
		if err := s.run(); err != nil {
			return 0, s.name, err
		}
	}
	return epoch, "", nil
}

func (c *Coordinator) selfMember() *allotpb.Member {
	return &allotpb.Member{Id: c.cfg.NodeID, RaftAddress: c.raftAddr, GrpcAddress: c.AdvertisedGRPCAddr(), HttpAddress: c.cfg.advertised(c.HTTPAddr())}
}

// loadRulesFile puts the rules file as the whole rule set if it differs
// from the replicated one.
func (c *Coordinator) loadRulesFile(ctx context.Context) error {
	list, err := rules.Load(c.cfg.RulesFile)
	if err != nil {
		return err
	}
	want, err := rules.NewSet(0, list)
	if err != nil {
		return err
	}
	if !c.cfg.Global { // a parent enforces every region's share
		for _, r := range want.Rules() {
			if r.LeavesOut(c.cfg.Region) {
				c.log.Warn("rule not enforced in this cluster's region, which it gives no share: requests here pass it unchecked; add the region to its regions, or put the rule on the clusters of those regions only",
					"file", c.cfg.RulesFile, "rule", r.Name, "region", c.cfg.Region, "regions", slices.Sorted(maps.Keys(r.Regions)))
			}
		}
	}
	if c.currentRules().SameRules(want) {
		return nil
	}
	cmd := &fsmpb.RulesCommand{ReplaceAll: true, Audit: c.selfStamp("RulesFile")}
	for i := range want.Rules() {
		cmd.Put = append(cmd.Put, rulespb.ToProto(&want.Rules()[i]))
	}
	_, err = c.apply(ctx, state.CmdRules, cmd, 10*time.Second)
	if err == nil {
		c.log.Info("rules loaded", "file", c.cfg.RulesFile, "rules", want.Len())
	}
	return err
}

// startTerm resets the allocator for a term of leadership at epoch: the
// cluster's settings, the fleet the replicated state shows, and the rules.
func (c *Coordinator) startTerm(epoch uint64, now time.Time) {
	set := c.settings()
	c.alloc.SetTiming(set.ReportInterval, set.LeaseTTL)
	c.alloc.Lead(epoch, now.UnixNano(), c.recentFleet(now, set.LeaseTTL))
	c.alloc.SetRules(c.currentRules())
}

// recentFleet is the number of nodes whose usage the replicated state
// shows in the two lease periods before now.
func (c *Coordinator) recentFleet(now time.Time, ttl time.Duration) (n int) {
	c.fsm.Read(func(s *state.State) { n = s.RecentNodes(now.Add(-2 * ttl).UnixNano()) })
	return n
}

// mirrorHome takes, on a group that is not home, what the home group
// decides for every group: its overrides, its resets, and its rules,
// taken with their version, so that agents see one rule set and one
// version whichever group answers.
func (c *Coordinator) mirrorHome(ctx context.Context) error {
	if err := c.mirrorOverrides(ctx); err != nil {
		return err
	}
	if err := c.mirrorResets(ctx); err != nil {
		return err
	}
	have := c.currentRules().Version()
	var lastErr error
	for _, a := range c.cfg.ShardHome {
		rctx, cancel := context.WithTimeout(withToken(ctx, c.joinToken()), 5*time.Second)
		rs, err := allotpb.NewAgentServiceClient(c.peers.conn(a)).GetRules(rctx, &allotpb.GetRulesRequest{KnownVersion: have})
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		if rs.GetVersion() == have || rs.GetVersion() == 0 {
			return nil // in step, or the home group has no rules yet
		}
		_, err = c.applyRulesCommand(c.ctx, &fsmpb.RulesCommand{Put: rs.GetRules(), ReplaceAll: true, Version: rs.GetVersion()})
		if err == nil {
			c.log.Info("rules mirrored from the home group", "version", rs.GetVersion(), "rules", len(rs.GetRules()))
		}
		return err
	}
	return lastErr
}

// configSettings are the settings a configuration asks for.
func configSettings(cfg *Config) allocator.Settings {
	return allocator.Settings{BillingWindow: cfg.BillingWindow, ReportInterval: cfg.ReportInterval, LeaseTTL: cfg.LeaseTTL}
}

// settings returns the cluster's settings, with this member's own for any
// not fixed yet (only until a leader has fixed them).
func (c *Coordinator) settings() allocator.Settings {
	var out allocator.Settings
	c.fsm.Read(func(s *state.State) { out = allocator.SettingsOr(s.Settings(), configSettings(&c.cfg)) })
	return out
}

// fixSettings, on the leader, fixes from this member's configuration the
// settings that are not fixed yet.
func (c *Coordinator) fixSettings() error {
	var settled bool
	c.fsm.Read(func(s *state.State) { settled = s.Settled() })
	if settled {
		return nil
	}
	id, err := newClusterID()
	if err != nil {
		return err
	}
	_, err = c.apply(c.ctx, state.CmdSettings, &fsmpb.SettingsCommand{
		BillingWindowNano:  int64(c.cfg.BillingWindow),
		ReportIntervalNano: int64(c.cfg.ReportInterval),
		LeaseTtlNano:       int64(c.cfg.LeaseTTL),
		ClusterId:          id,
	}, 10*time.Second)
	if err != nil {
		return fmt.Errorf("coordinator: fixing the cluster's settings: %w", err)
	}
	return nil
}

// newClusterID is a random cluster ID: 16 bytes, in hex.
func newClusterID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("coordinator: a cluster ID: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// clusterID is the replicated cluster ID, "" until the first leader fixes it.
func (c *Coordinator) clusterID() (id string) {
	c.fsm.Read(func(s *state.State) { id = s.ClusterID() })
	return id
}

// warnSettings logs, once for each value the cluster's settings take,
// which of this member's flags they override. last is the value warned
// about before; the caller keeps it.
func (c *Coordinator) warnSettings(last *allocator.Settings) {
	var cluster allocator.Settings
	var settled bool
	c.fsm.Read(func(s *state.State) {
		if settled = s.Settled(); settled {
			cluster = allocator.SettingsOr(s.Settings(), allocator.Settings{})
		}
	})
	if !settled || cluster == *last {
		return
	}
	*last = cluster
	own := configSettings(&c.cfg)
	var diffs []any
	for _, d := range []struct {
		flag        string
		mine, their time.Duration
	}{
		{"billing_window", own.BillingWindow, cluster.BillingWindow},
		{"report_interval", own.ReportInterval, cluster.ReportInterval},
		{"lease_ttl", own.LeaseTTL, cluster.LeaseTTL},
	} {
		if d.mine != d.their {
			diffs = append(diffs, d.flag, fmt.Sprintf("flag %v, cluster %v", d.mine, d.their))
		}
	}
	if len(diffs) > 0 {
		c.log.Warn("this member's settings differ from the cluster's; the cluster's win (they are fixed by its first leader)", diffs...)
	}
}

// roundInterval is how often the leader re-divides allowances: the
// configured RoundInterval, or a quarter of the cluster's report interval.
func (c *Coordinator) roundInterval(set allocator.Settings) time.Duration {
	if c.roundEvery > 0 {
		return c.roundEvery
	}
	return allocator.DefaultRoundInterval(set.ReportInterval)
}
