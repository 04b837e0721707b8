package coordinator

import (
	"context"
	"errors"

	"github.com/allot-io/allot/internal/clusterclient"
	"github.com/allot-io/allot/internal/shardroute"
	"github.com/allot-io/allot/lease/rules"
	allotpb "github.com/allot-io/allot/proto"
)

// An Envoy RLQS stream's reports go through a shard router, as an
// agent's do: in a region split into shard groups its buckets' usage
// and demand go to the group owning each tenant's slot, exactly once per
// group (docs/coordinator.md#shard-groups). Unsplit, every report goes to
// this member's own group, numbered in the router's sequence from the
// stream's start.

// routeStream makes a stream's router: this group's lane is the stream's
// own way to its leader (here, or forwarded); other groups are called
// with this member's credentials.
func (c *Coordinator) routeStream(q *quotaStream) *shardroute.Router {
	local := localLane{q}
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
		Map:    c.homeMap,
		Global: c.globalRule,
		Log:    c.log.Named("rlqs"),
	})
}

// homeMap is the region's map: this group's own when it is home,
// otherwise the home group's.
func (c *Coordinator) homeMap(ctx context.Context, known uint64) (*allotpb.ShardMap, error) {
	if c.isHome() {
		return c.shardMap().Proto(), nil
	}
	var lastErr error = errors.New("no home group address")
	for _, a := range c.cfg.ShardHome {
		pm, err := allotpb.NewShardServiceClient(c.peers.conn(a)).GetShardMap(withToken(ctx, c.joinToken()), &allotpb.GetShardMapRequest{KnownVersion: known})
		if err == nil {
			return pm, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// globalRule reports whether a rule is a global one.
func (c *Coordinator) globalRule(name string) bool {
	r, ok := c.currentRules().Get(name)
	return ok && r.Scope == rules.Global
}

// localLane is this group: the stream's report on its leader.
type localLane struct{ q *quotaStream }

func (l localLane) Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	return l.q.sendLeader(ctx, req)
}

func (localLane) Learn([]string) {}

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
