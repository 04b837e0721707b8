package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/coordinator/rlqs"
	"github.com/allot-io/allot/internal/clusterclient"
	"github.com/allot-io/allot/internal/shardroute"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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
