package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/fsm/state"
	"github.com/allot-io/allot/coordinator/internal/slotmove"
	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Shard groups (docs/coordinator.md#shard-groups). A region's coordinators
// may run as several groups, each an ordinary cluster owning some slots.
// The home group, the one started without ShardHome, holds the shard map
// and the rules, divides the global rules, and its leader carries out
// moves; every other group mirrors the home's rules and owns only what
// moves gave it.

// groupID is this cluster's shard group.
func (c *Coordinator) groupID() string {
	if c.cfg.Group != "" {
		return c.cfg.Group
	}
	return shard.DefaultGroup
}

// isHome reports whether this cluster is its region's home group.
func (c *Coordinator) isHome() bool { return len(c.cfg.ShardHome) == 0 }

// slotsMoved is the refusal of a report whose usage falls in slots this
// group does not own: nothing of it was applied.
func (c *Coordinator) slotsMoved(slots []uint32) error {
	var v uint64
	c.fsm.Read(func(st *state.State) { v = st.ShardMapVersion() })
	v = max(v, c.homeMapVersion.Load())
	shown := slots
	if len(shown) > 8 {
		shown = shown[:8]
	}
	st := status.New(codes.FailedPrecondition, fmt.Sprintf("shard group %q does not own slots %v (of %d) of this report's usage: nothing of it was applied; route it by a newer shard map", c.groupID(), shown, len(slots)))
	if d, err := st.WithDetails(&allotpb.SlotsMoved{Group: c.groupID(), Slots: slots, MapVersion: v}); err == nil {
		st = d
	}
	return st.Err()
}

// memberAddrs are the gRPC addresses of this group's members, as the
// replicated state records them.
func (c *Coordinator) memberAddrs() []string {
	var addrs []string
	c.fsm.Read(func(st *state.State) {
		for _, mb := range st.Members() {
			if a := mb.GetGrpcAddress(); a != "" {
				addrs = append(addrs, a)
			}
		}
	})
	slices.Sort(addrs)
	return addrs
}

// shardMap is the region's map as this (home) member holds it: the
// region as one group owning every slot, version 0, until a group is
// added.
func (c *Coordinator) shardMap() *shard.Map {
	var m *shard.Map
	c.fsm.Read(func(st *state.State) {
		if sm := st.ShardMap(); sm != nil {
			m = sm.Clone()
		}
	})
	if m == nil {
		m = shard.Single(c.groupID(), c.memberAddrs())
		m.Version = 0
	}
	return m
}

type shardServer struct {
	allotpb.UnimplementedShardServiceServer
	c *Coordinator
}

// notHome refuses a call only the home group answers.
func (c *Coordinator) notHome(what string) error {
	return status.Errorf(codes.FailedPrecondition, "%s: shard group %q is not its region's home group; call the home group (%v)", what, c.groupID(), c.cfg.ShardHome)
}

func (s *shardServer) GetShardMap(ctx context.Context, req *allotpb.GetShardMapRequest) (*allotpb.ShardMap, error) {
	c := s.c
	if !c.isHome() {
		return nil, c.notHome("GetShardMap")
	}
	// The leader's: a member restarting from its data directory replays
	// its log, and until then holds an old map (or none).
	return onLeader(ctx, c, func() (*allotpb.ShardMap, error) {
		if !c.leading.Load() {
			return nil, ErrNotLeader
		}
		m := c.shardMap()
		if req.GetKnownVersion() >= m.Version && m.Version > 0 {
			return &allotpb.ShardMap{Version: m.Version}, nil
		}
		return m.Proto(), nil
	}, func(ctx context.Context, addr string) (*allotpb.ShardMap, error) {
		return allotpb.NewShardServiceClient(c.peers.conn(addr)).GetShardMap(ctx, req)
	})
}

func (s *shardServer) AddGroup(ctx context.Context, req *allotpb.AddGroupRequest) (*allotpb.ShardMap, error) {
	c := s.c
	if !c.isHome() {
		return nil, c.notHome("AddGroup")
	}
	if err := shard.ValidGroupID(req.GetId()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "id: %v", err)
	}
	if len(req.GetCoordinators()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "coordinators: a group needs at least one member's gRPC address")
	}
	if req.GetId() == c.groupID() {
		return nil, status.Errorf(codes.InvalidArgument, "id: %q is the home group", req.GetId())
	}
	out, err := onLeader(ctx, c, func() (*allotpb.ShardMap, error) {
		return c.applyShardMap(&fsmpb.ShardMapCommand{AddGroup: &allotpb.ShardGroup{Id: req.GetId(), Coordinators: req.GetCoordinators()}})
	}, func(ctx context.Context, addr string) (*allotpb.ShardMap, error) {
		return allotpb.NewShardServiceClient(c.peers.conn(addr)).AddGroup(ctx, req)
	})
	c.metrics.adminRequests.WithLabelValues("AddGroup", resultLabel(err)).Inc()
	return out, grpcError(err)
}

func (s *shardServer) MoveSlots(ctx context.Context, req *allotpb.MoveSlotsRequest) (*allotpb.MoveSlotsResponse, error) {
	c := s.c
	if !c.isHome() {
		return nil, c.notHome("MoveSlots")
	}
	if req.GetFirst() > req.GetLast() || req.GetLast() >= shard.Slots {
		return nil, status.Errorf(codes.InvalidArgument, "slots %d..%d are not a range of 0..%d", req.GetFirst(), req.GetLast(), shard.Slots-1)
	}
	out, err := onLeader(ctx, c, func() (*allotpb.MoveSlotsResponse, error) {
		m := c.shardMap()
		mv := &allotpb.SlotMove{First: req.GetFirst(), Last: req.GetLast(), From: m.Owner(shard.Slot(req.GetFirst())), To: req.GetTo(), StartedUnixNano: c.now().UnixNano()}
		pm, err := c.applyShardMap(&fsmpb.ShardMapCommand{Plan: mv})
		if err != nil {
			return nil, err
		}
		c.kickMover()
		return &allotpb.MoveSlotsResponse{Move: pm.GetMoves()[len(pm.GetMoves())-1]}, nil
	}, func(ctx context.Context, addr string) (*allotpb.MoveSlotsResponse, error) {
		return allotpb.NewShardServiceClient(c.peers.conn(addr)).MoveSlots(ctx, req)
	})
	c.metrics.adminRequests.WithLabelValues("MoveSlots", resultLabel(err)).Inc()
	return out, grpcError(err)
}

func (s *shardServer) PinSlot(ctx context.Context, req *allotpb.PinSlotRequest) (*allotpb.ShardMap, error) {
	c := s.c
	if !c.isHome() {
		return nil, c.notHome("PinSlot")
	}
	if req.GetSlot() >= shard.Slots {
		return nil, status.Errorf(codes.InvalidArgument, "slot: %d is not one of 0..%d", req.GetSlot(), shard.Slots-1)
	}
	out, err := onLeader(ctx, c, func() (*allotpb.ShardMap, error) {
		return c.applyShardMap(&fsmpb.ShardMapCommand{Pin: req})
	}, func(ctx context.Context, addr string) (*allotpb.ShardMap, error) {
		return allotpb.NewShardServiceClient(c.peers.conn(addr)).PinSlot(ctx, req)
	})
	c.metrics.adminRequests.WithLabelValues("PinSlot", resultLabel(err)).Inc()
	return out, grpcError(err)
}

func (s *shardServer) GroupSlots(ctx context.Context, req *allotpb.GroupSlotsRequest) (*allotpb.GroupSlotsResponse, error) {
	c := s.c
	if req.GetGroup() != c.groupID() {
		return nil, status.Errorf(codes.FailedPrecondition, "this is shard group %q, not %q", c.groupID(), req.GetGroup())
	}
	return onLeader(ctx, c, func() (*allotpb.GroupSlotsResponse, error) { return c.groupStep(req) },
		func(ctx context.Context, addr string) (*allotpb.GroupSlotsResponse, error) {
			return allotpb.NewShardServiceClient(c.peers.conn(addr)).GroupSlots(ctx, req)
		})
}

// groupStep commits one step of a move in this group's log.
func (c *Coordinator) groupStep(req *allotpb.GroupSlotsRequest) (*allotpb.GroupSlotsResponse, error) {
	op, ok := slotmove.Op(req.GetStep())
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "step: unknown step %v", req.GetStep())
	}
	if !c.isHome() {
		var err error
		c.fsm.Read(func(st *state.State) { err = slotmove.NotStarted(st, c.groupID()) })
		if err != nil {
			return nil, err
		}
	}
	res, err := c.apply(c.ctx, state.CmdSlots, &fsmpb.SlotsCommand{
		Op: op, MoveId: req.GetMoveId(), First: req.GetFirst(), Last: req.GetLast(), Peer: req.GetPeer(),
		Group: c.groupID(), ProposedUnixNano: c.now().UnixNano(), FinishedBelow: req.GetFinishedBelow(),
	}, moveStepTimeout)
	if err != nil {
		return nil, err
	}
	r := res.(*fsmpb.SlotsResult)
	if r.GetDone() && op == fsmpb.SlotsCommand_ACQUIRE {
		c.alloc.LearnSlots(shard.Slot(req.GetFirst()), shard.Slot(req.GetLast()), c.now().UnixNano())
	}
	if r.GetDone() {
		c.log.Info("shard step committed", "step", req.GetStep().String(), "move", req.GetMoveId(), "slots", fmt.Sprintf("%d-%d", req.GetFirst(), req.GetLast()), "owned", r.GetOwned())
	}
	return &allotpb.GroupSlotsResponse{Done: r.GetDone(), Refused: r.GetRefused(), Owned: r.GetOwned()}, nil
}

// applyShardMap commits a change of the home group's map.
func (c *Coordinator) applyShardMap(cmd *fsmpb.ShardMapCommand) (*allotpb.ShardMap, error) {
	cmd.Home = c.groupID()
	cmd.Coordinators = c.memberAddrs()
	res, err := c.apply(c.ctx, state.CmdShardMap, cmd, 10*time.Second)
	if errors.Is(err, state.ErrShardMap) {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err != nil {
		return nil, err
	}
	return res.(*allotpb.ShardMap), nil
}

// startGroup is what a leader of a group that is not home does first: a
// group added to a region owns no slot until a move gives it some.
func (c *Coordinator) startGroup() error {
	if c.isHome() {
		return nil
	}
	named := ""
	c.fsm.Read(func(st *state.State) { named = st.Group() })
	if named != "" {
		return nil
	}
	_, err := c.apply(c.ctx, state.CmdSlots, &fsmpb.SlotsCommand{Op: fsmpb.SlotsCommand_EMPTY, Group: c.groupID(), ProposedUnixNano: c.now().UnixNano()}, 10*time.Second)
	return err
}

// mirrorRules is a non-home group leader's loop: the rules are the home
// group's, taken with their version, so that agents see one rule set and
// one version whichever group answers.
func (c *Coordinator) mirrorRules(ctx context.Context, every time.Duration) {
	t := c.cfg.Clock.NewTicker(every)
	defer t.Stop()
	defer c.metrics.slotsOwned.Set(0)
	c.split.Store(true)
	for {
		var owned int
		c.fsm.Read(func(st *state.State) { owned = st.OwnedSlots() })
		c.metrics.slotsOwned.Set(float64(owned))
		if err := c.mirrorOnce(ctx); err != nil {
			c.log.Warn("could not mirror the home group's rules; retrying", "home", c.cfg.ShardHome, "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

func (c *Coordinator) mirrorOnce(ctx context.Context) error {
	if pm, err := c.homeMap(ctx, c.homeMapVersion.Load()); err == nil && pm.GetVersion() > c.homeMapVersion.Load() {
		// Agents refresh their map from any group's answer.
		c.homeMapVersion.Store(pm.GetVersion())
	}
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

// slotLoad counts, on a split region's leader, the key entries reported
// per slot: the load `allot shards rebalance` divides. Counting costs a
// hash of each entry's tenant, so a region never split does not count.
type slotLoad struct {
	since   atomic.Int64
	entries [shard.Slots]atomic.Uint64
}

func (l *slotLoad) reset(now int64) {
	for i := range l.entries {
		l.entries[i].Store(0)
	}
	l.since.Store(now)
}

// countLoad adds a report's entries to the slots they fall in.
func (c *Coordinator) countLoad(req *allotpb.ReportRequest) {
	if !c.split.Load() {
		return
	}
	for _, d := range req.GetDemand() {
		c.load.entries[shard.Of(d.GetTenant())].Add(1)
	}
	for _, u := range req.GetUsage().GetCounts() {
		c.load.entries[shard.Of(u.GetTenant())].Add(1)
	}
}

func (s *shardServer) SlotLoad(ctx context.Context, req *allotpb.SlotLoadRequest) (*allotpb.SlotLoadResponse, error) {
	c := s.c
	return onLeader(ctx, c, func() (*allotpb.SlotLoadResponse, error) {
		if !c.leading.Load() {
			return nil, ErrNotLeader
		}
		out := &allotpb.SlotLoadResponse{Group: c.groupID(), Leader: c.cfg.NodeID, SinceUnixNano: c.load.since.Load(), NowUnixNano: c.now().UnixNano(), Entries: map[uint32]uint64{}}
		for i := range c.load.entries {
			if n := c.load.entries[i].Load(); n > 0 {
				out.Entries[uint32(i)] = n
			}
		}
		return out, nil
	}, func(ctx context.Context, addr string) (*allotpb.SlotLoadResponse, error) {
		return allotpb.NewShardServiceClient(c.peers.conn(addr)).SlotLoad(ctx, req)
	})
}
