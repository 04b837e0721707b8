package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/coordinator/rlqs"
	"github.com/allot-io/allot/internal/clusterclient"
	"github.com/allot-io/allot/internal/shardroute"
	"github.com/allot-io/allot/internal/tracing"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

type agentServer struct {
	allotpb.UnimplementedAgentServiceServer
	c *Coordinator
}

// Report takes an agent's usage and demand and answers with its leases.
//
// The order matters. The usage batch is committed first: a report is
// answered only once its usage is in the ledger, and its demand divides
// nothing before that, so that a failed commit leaves no share granted
// for a lease never sent (the agent re-sends the whole report). Then this
// member must still lead: a commit proves it (it completed after the
// report arrived), and a report without usage waits for a leadership
// check that started after it arrived. Only then is the demand folded
// into the allocator and the answer built. A follower, or a leader that
// lost its quorum, refuses with the leader's address.
func (s *agentServer) Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	return s.c.report(ctx, req, true)
}

// report handles a report; checkCaller says the caller must hold a
// credential for the report's node (an agent's), which a report this
// coordinator makes for an Envoy stream (newRLQS, below) need not.
func (c *Coordinator) report(ctx context.Context, req *allotpb.ReportRequest, checkCaller bool) (resp *allotpb.ReportResponse, err error) {
	// The agent takes the time the report spends here (its usage's commit,
	// the wait for a round) out of the round trip before it estimates its
	// clock's offset from ours: see received_unix_nano.
	received := c.now().UnixNano()
	if c.tracer != nil {
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(tracing.Node.String(req.GetNode()), tracing.Region.String(req.GetRegion()),
				attribute.Int("allot.report.usage_counts", len(req.GetUsage().GetCounts())),
				attribute.Int64("allot.report.usage_seq", int64(req.GetUsage().GetSeq())),
				attribute.Int("allot.report.demand_keys", len(req.GetDemand())))
			defer func() {
				span.SetAttributes(attribute.Int("allot.report.leases", len(resp.GetLeases())), attribute.Bool("allot.report.answered", err == nil))
			}()
		}
	}
	c.metrics.reportBytes.Observe(float64(proto.Size(req)))
	c.metrics.reportKeys.Observe(float64(len(req.GetDemand())))
	// One view of the state serves the whole report: its settings, its
	// node, its slots, the overrides and the answer are all read at one
	// entry, without the FSM's lock.
	v := c.fsm.View()
	set := allocator.SettingsOr(v.Settings(), configSettings(&c.cfg))
	lim := allocator.ReportLimits(c.cfg.MaxReportKeys, c.cfg.MaxUnitsPerSecond, c.cfg.LedgerRetention, set.BillingWindow, c.now())
	if err := allocator.ReportError(allotpb.ValidateReport(req, lim)); err != nil {
		c.metrics.reports.WithLabelValues("invalid").Inc()
		return nil, err
	}
	if checkCaller {
		if err := c.authz.MayReportAs(ctx, req.GetNode(), req.GetRegion()); err != nil {
			c.metrics.reports.WithLabelValues("forbidden").Inc()
			return nil, err
		}
	}
	if g := req.GetGroup(); g != "" && g != c.groupID() {
		c.metrics.reports.WithLabelValues("wrong_group").Inc()
		return nil, status.Errorf(codes.FailedPrecondition, "this is shard group %q, not %q: nothing of the report was applied", c.groupID(), g)
	}
	if !c.leading.Load() {
		c.metrics.reports.WithLabelValues("redirected").Inc()
		return nil, c.notLeader(ctx)
	}
	entries := len(req.GetDemand()) + len(req.GetUsage().GetCounts())
	if !c.intake.Take(req.GetUrgent(), c.alloc.Knows(req.GetNode()), c.roundsBehind.Load(), entries) {
		c.metrics.reports.WithLabelValues("shed").Inc()
		resp := c.shedAnswer(v, req, set)
		resp.ReceivedUnixNano = received
		return resp, nil
	}
	defer c.intake.Done(entries)
	if err := c.admitNode(v, req.GetNode()); err != nil {
		c.metrics.reports.WithLabelValues("new_node_limit").Inc()
		return nil, err
	}
	committed, acked := false, uint64(0)
	if b := req.GetUsage(); b != nil && b.GetSeq() > 0 {
		// The usage is committed with other reports' in one batched
		// entry; under a traced report, its wait is a raft.apply span.
		end := c.startBatchedApply(ctx)
		done, err := c.batcher.Submit(ctx, &fsmpb.AgentUsage{Node: req.GetNode(), Incarnation: req.GetIncarnation(), Region: req.GetRegion(), Batch: b})
		if err != nil {
			end(err)
			c.metrics.reports.WithLabelValues("failed").Inc()
			return nil, grpcError(err)
		}
		select {
		case r := <-done:
			end(r.Err)
			switch {
			case errors.Is(r.Err, ErrNotLeader):
				c.metrics.reports.WithLabelValues("redirected").Inc()
				return nil, c.notLeader(ctx)
			case r.Err != nil:
				c.metrics.reports.WithLabelValues("failed").Inc()
				return nil, status.Errorf(codes.Unavailable, "usage not committed, re-send it: %v", r.Err)
			case r.Moved != nil:
				c.metrics.reports.WithLabelValues("moved").Inc()
				return nil, c.groups.SlotsMoved(r.Moved)
			case r.Stale:
				c.metrics.reports.WithLabelValues("stale").Inc()
				return nil, staleBatch(req)
			}
			committed, acked = true, r.Acked
		case <-ctx.Done():
			end(ctx.Err())
			c.metrics.reports.WithLabelValues("failed").Inc()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	} else if err := c.check.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			c.metrics.reports.WithLabelValues("failed").Inc()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		c.metrics.reports.WithLabelValues("redirected").Inc()
		return nil, c.notLeader(ctx)
	}
	if !c.leading.Load() { // leadership lost, or not yet ready again
		c.metrics.reports.WithLabelValues("redirected").Inc()
		return nil, c.notLeader(ctx)
	}
	if err := ctx.Err(); err != nil {
		// The caller left while its usage committed: it re-sends the
		// batch, which the ledger recognises, and nothing is divided for
		// an answer nobody reads.
		c.metrics.reports.WithLabelValues("failed").Inc()
		return nil, status.FromContextError(err).Err()
	}
	now := c.now()
	c.groups.CountLoad(req)
	f := c.alloc.Take(v, c.isHome(), req, now.UnixNano())
	if f.Stale() {
		// A pool the report changed is divided at the next round, which
		// every report folded until then shares: the answer waits for it,
		// for as long as the caller does.
		select {
		case <-c.alloc.AwaitRound():
		case <-ctx.Done():
			c.metrics.reports.WithLabelValues("failed").Inc()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if !c.leading.Load() {
			c.metrics.reports.WithLabelValues("redirected").Inc()
			return nil, c.notLeader(ctx)
		}
		now = c.now()
	}
	resp = c.alloc.Reply(v, f, now, set, committed, acked)
	c.metrics.leasesGranted.Add(float64(len(resp.GetLeases())))
	resp.ReceivedUnixNano, resp.CoordinatorUnixNano = received, c.now().UnixNano()
	resp.ShardMapVersion = max(resp.ShardMapVersion, c.groups.HomeMapVersion())
	c.metrics.reports.WithLabelValues("ok").Inc()
	return resp, nil
}

// shedAnswer is the answer to a report the leader did not take: nothing
// of it applied, no lease changed, and the leases it holds renewed for a
// lease period when this leader has heard from the node in its term (it
// then counts them held until then; see Allocator.Shed). The agent keeps
// enforcing them and asks for nothing early for an interval; its usage
// goes again in its next report.
func (c *Coordinator) shedAnswer(v *state.View, req *allotpb.ReportRequest, set allocator.Settings) *allotpb.ReportResponse {
	now := c.now()
	resp := &allotpb.ReportResponse{
		Protocol:            allotpb.ProtocolVersion_PROTOCOL_VERSION_1,
		Shed:                true,
		RetryAfterNano:      int64(set.ReportInterval),
		ReportIntervalNano:  int64(set.ReportInterval),
		LeaseTtlNano:        int64(set.LeaseTTL),
		CoordinatorUnixNano: now.UnixNano(),
		Epoch:               c.alloc.Term(),
		// The cluster's: an agent that predates shed answers takes a
		// version equal to its own, with no rules, as "the cluster has
		// none".
		RulesVersion: v.Rules().Version(),
	}
	if c.alloc.Shed(req.GetNode(), now.UnixNano()) {
		resp.RenewUnixNano = now.Add(set.LeaseTTL).UnixNano()
	}
	return resp
}

// staleBatch is the refusal of a usage batch cut long ago by an
// incarnation the cluster had forgotten (state.StaleBatchAge): it may have
// been applied before, so it is recorded as applied and none of it is
// counted. Sent again, it is acknowledged; the agent sends its later
// batches as usual.
func staleBatch(req *allotpb.ReportRequest) error {
	b := req.GetUsage()
	st := status.New(codes.FailedPrecondition, fmt.Sprintf("usage batch %d of this incarnation was cut at %s, and the cluster no longer knew the incarnation: "+
		"it may have been counted before, so none of it is counted now (it is acknowledged when sent again); later batches are counted as usual",
		b.GetSeq(), time.Unix(0, b.GetCutUnixNano()).UTC().Format(time.RFC3339)))
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: allotpb.ReasonStaleBatch, Domain: allotpb.ErrorDomain,
		Metadata: map[string]string{"seq": strconv.FormatUint(b.GetSeq(), 10)}}); err == nil {
		st = d
	}
	return st.Err()
}

// startBatchedApply starts the raft.apply span of a report whose usage
// waits for the batcher's entry, when ctx holds a recording span, and
// returns what ends it.
func (c *Coordinator) startBatchedApply(ctx context.Context) (end func(error)) {
	if c.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return func(error) {}
	}
	_, span := c.tracer.Start(ctx, "raft.apply", trace.WithAttributes(tracing.Command.String(state.CmdReports.String()), attribute.Bool("allot.raft.batched", true)))
	return func(err error) {
		tracing.Fail(span, err)
		span.End()
	}
}

// admitNode lets a node never heard from before join the fleet, within
// MaxNewNodesPerMinute. A node is known if this leader has its demand or
// the replicated state its usage, so a failover does not make the fleet
// new again.
func (c *Coordinator) admitNode(v *state.View, node string) error {
	if c.alloc.Knows(node) || v.HasNode(node) {
		return nil
	}
	if c.newNodes.Admit(c.now()) {
		c.metrics.newNodes.WithLabelValues("admitted").Inc()
		return nil
	}
	c.metrics.newNodes.WithLabelValues("refused").Inc()
	return status.Errorf(codes.ResourceExhausted, "too many new node IDs this minute (at most %d): this node is refused until the fleet's growth slows; retry later", c.cfg.MaxNewNodesPerMinute)
}

// GetRules returns the rule set; any member answers from its replica.
func (s *agentServer) GetRules(ctx context.Context, req *allotpb.GetRulesRequest) (*allotpb.RuleSet, error) {
	var out *allotpb.RuleSet
	s.c.fsm.Read(func(st *state.State) { out = rulespb.SetToProto(st.Rules()) })
	return out, nil
}

// The RLQS front door (package coordinator/rlqs) serves each Envoy stream as one more
// agent; this is its intake on this member. A stream's reports go
// through a shard router, as an agent's do: in a region split into shard
// groups its buckets' usage and demand go to the group owning each
// tenant's slot, exactly once per group
// (docs/coordinator.md#shard-groups). Unsplit, every report goes to this
// member's own group, numbered in the router's sequence from the stream's
// start.

// newRLQS makes the front door of this member's Envoy streams.
func (c *Coordinator) newRLQS() *rlqs.Server {
	return rlqs.New(rlqs.Config{
		Intake: streamIntake{c}, Region: c.cfg.Region, Clock: c.cfg.Clock, Log: c.log,
		Metrics:  rlqs.Metrics{Streams: c.metrics.rlqsStreams, Requests: c.metrics.rlqsRequests, Abandoned: c.metrics.rlqsAbandoned},
		Caller:   func(ctx context.Context) string { return authz.Identity(ctx).Name() },
		Draining: c.draining,
	})
}

// streamIntake is this member as its RLQS streams see it.
type streamIntake struct{ c *Coordinator }

func (i streamIntake) Rules() *rules.Set             { return i.c.currentRules() }
func (i streamIntake) ReportInterval() time.Duration { return i.c.settings().ReportInterval }
func (i streamIntake) BillingWindow() time.Duration  { return i.c.settings().BillingWindow }
func (i streamIntake) Reporter() rlqs.Reporter       { return i.c.routeStream() }

// routeStream makes a stream's router: this group's lane is the way to
// its leader (here, or forwarded); other groups are called with this
// member's credentials.
func (c *Coordinator) routeStream() *shardroute.Router {
	local := leaderLane{c}
	lane := func(group string, addrs []string) shardroute.Lane {
		if group == c.groupID() {
			return local
		}
		return &memberLane{c: c, client: clusterclient.New(addrs, c.grpcDialOptions())}
	}
	var home shardroute.Lane = local
	if !c.isHome() {
		home = lane("", c.cfg.ShardHome)
	}
	return shardroute.New(home, shardroute.Config{
		Lane:   lane,
		Map:    c.groups.HomeMap,
		Global: c.globalRule,
		Log:    c.log.Named("rlqs"),
	})
}

// globalRule reports whether a rule is a global one.
func (c *Coordinator) globalRule(name string) bool {
	r, ok := c.currentRules().Get(name)
	return ok && r.Scope == rules.Global
}

// leaderLane is this group: a stream's report made on its leader, here,
// or forwarded to it with this member's own credentials (the leader
// accepts a member's report for any node).
type leaderLane struct{ c *Coordinator }

func (l leaderLane) Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	c := l.c
	if c.leading.Load() {
		resp, err := c.report(ctx, req, false)
		if status.Code(err) != codes.Unavailable || c.leading.Load() {
			return resp, err
		}
	}
	_, addr := c.Leader()
	if addr == "" || addr == c.AdvertisedGRPCAddr() {
		return nil, errors.New("no leader elected yet")
	}
	c.metrics.forwardedCalls.Inc()
	fctx, cancel := context.WithTimeout(ctx, 2*max(c.settings().ReportInterval, time.Second))
	defer cancel()
	return allotpb.NewAgentServiceClient(c.peers.conn(addr)).Report(fctx, req)
}

func (leaderLane) Learn([]string) {}

// memberLane is another group, called with this member's credentials
// (a member may report for any node).
type memberLane struct {
	c      *Coordinator
	client *clusterclient.Client
}

func (l *memberLane) Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	return l.client.Report(withToken(ctx, l.c.joinToken()), req)
}

func (l *memberLane) Learn(addrs []string) { l.client.Learn(addrs) }
