package agent

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/internal/shard"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// shardClient is a client of the home group's ShardService.
func shardClient(t *testing.T, addr string) allotpb.ShardServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return allotpb.NewShardServiceClient(cc)
}

// moveAndWait moves slots first..last to group and waits until the move
// is over; it returns the move's last phase.
func moveAndWait(t *testing.T, sc allotpb.ShardServiceClient, first, last uint32, group string) allotpb.SlotMove_Phase {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mv, err := sc.MoveSlots(ctx, &allotpb.MoveSlotsRequest{First: first, Last: last, To: group})
	if err != nil {
		t.Fatal(err)
	}
	var phase allotpb.SlotMove_Phase
	testwait.For(t, 30*time.Second, fmt.Sprintf("move %d to finish", mv.GetMove().GetId()), func() bool {
		m, err := sc.GetShardMap(ctx, &allotpb.GetShardMapRequest{})
		if err != nil || len(m.GetMoves()) < int(mv.GetMove().GetId()) {
			return false
		}
		phase = m.GetMoves()[mv.GetMove().GetId()-1].GetPhase()
		return !shard.Active(&allotpb.SlotMove{Phase: phase})
	})
	return phase
}

// TestShardedRegionCountsOnce: a region of two shard groups, two gateways
// checking twenty tenants, and half the slots moved from the home group to
// the other and back while they check. The agents follow the map without
// being told; the two groups' ledgers, summed, hold every admitted unit
// exactly once.
func TestShardedRegionCountsOnce(t *testing.T) {
	home := coordinators(t, 1)
	g1 := coordinatorsWith(t, 1, func(cfg *coordinator.Config) {
		cfg.NodeID, cfg.Group, cfg.ShardHome = "g1-c1", "g1", addrs(home)
	})
	putRules(t, home[0].GRPCAddr(), rule("quota", rules.Tenant, algo.TokenBucket, 1_000_000, time.Second, lease.Quota))
	sc := shardClient(t, home[0].GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sc.AddGroup(ctx, &allotpb.AddGroupRequest{Id: "g1", Coordinators: addrs(g1)}); err != nil {
		t.Fatal(err)
	}
	var agents []*Agent
	for i := 0; i < 2; i++ {
		agents = append(agents, newAgent(t, fmt.Sprintf("gw-%d", i), addrs(home), nil))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	admitted := make([]atomic.Int64, 20)
	var denied atomic.Int64
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			drive(agents[i%2], Request{Tenant: fmt.Sprintf("tenant-%d", i)}, 200, stop, &admitted[i], &denied)
		}()
	}
	for _, to := range []string{"g1", "main", "g1"} {
		if phase := moveAndWait(t, sc, 0, shard.Slots/2-1, to); phase != allotpb.SlotMove_DONE {
			t.Fatalf("move to %s ended %v", to, phase)
		}
		// Traffic under the new map: three more answered reports each.
		before := []int64{reportsOK(agents[0]), reportsOK(agents[1])}
		testwait.For(t, 10*time.Second, "three reports under the new map", func() bool {
			return reportsOK(agents[0]) >= before[0]+3 && reportsOK(agents[1]) >= before[1]+3
		})
	}
	close(stop)
	wg.Wait()
	for _, a := range agents {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := a.Close(cctx); err != nil {
			t.Fatal(err)
		}
		ccancel()
	}
	// The home group answers for the region; g1 for its part alone.
	region := ledgerAdmitted(ctx, t, home[0].GRPCAddr(), "", "quota")
	inG1 := ledgerQuery(ctx, t, g1[0].GRPCAddr(), "", &allotpb.UsageQuery{Rule: "quota", GroupOnly: true})
	moved := 0
	for i := range 20 {
		tn := fmt.Sprintf("tenant-%d", i)
		if got, want := region[tn], uint64(admitted[i].Load()); got != want {
			t.Errorf("%s: the region's ledger holds %d (g1 %d of it), the gateways admitted %d", tn, got, inG1[tn], want)
		}
		if shard.Of(tn) < shard.Slots/2 && inG1[tn] > 0 {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no tenant's usage reached g1: the agents did not follow the map")
	}
}
