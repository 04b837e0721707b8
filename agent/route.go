package agent

import (
	"context"

	"github.com/allot-io/allot/internal/clusterclient"
	"github.com/allot-io/allot/internal/shardroute"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
)

// newRouter routes the agent's reports among its region's shard groups,
// starting from the home group's client (Config.Coordinators); global
// says which rules are global.
func newRouter(home *clusterclient.Client, log hclog.Logger, global func(string) bool) *shardroute.Router {
	return shardroute.New(home, shardroute.Config{
		Lane: func(_ string, addrs []string) shardroute.Lane { return home.Sibling(addrs) },
		Map: func(ctx context.Context, known uint64) (*allotpb.ShardMap, error) {
			var pm *allotpb.ShardMap
			err := home.Call(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
				var err error
				pm, err = allotpb.NewShardServiceClient(cc).GetShardMap(ctx, &allotpb.GetShardMapRequest{KnownVersion: known})
				return err
			})
			return pm, err
		},
		Global: global,
		Log:    log,
	})
}

// globalRule reports whether the rule named is a global one, whose classes
// the home group divides.
func (a *Agent) globalRule(name string) bool {
	c := a.rules.Load()
	if c == nil {
		return false
	}
	r, ok := c.set.Get(name)
	return ok && r.Scope == rules.Global
}
