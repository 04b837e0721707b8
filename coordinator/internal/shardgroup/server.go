package shardgroup

import (
	"context"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// callLeader is Member.OnLeader for a call answered with a T.
func callLeader[T any](ctx context.Context, m Member, local func() (T, error), forward func(ctx context.Context, addr string) (T, error)) (T, error) {
	v, err := m.OnLeader(ctx, func() (any, error) { return local() }, func(ctx context.Context, addr string) (any, error) { return forward(ctx, addr) })
	out, _ := v.(T)
	return out, err
}

type shardServer struct {
	allotpb.UnimplementedShardServiceServer
	g *Group
}

// Server is the group's ShardService.
func (g *Group) Server() allotpb.ShardServiceServer { return &shardServer{g: g} }

func (s *shardServer) GetShardMap(ctx context.Context, req *allotpb.GetShardMapRequest) (*allotpb.ShardMap, error) {
	g := s.g
	if !g.IsHome() {
		return nil, g.NotHome("GetShardMap")
	}
	// The leader's: a member restarting from its data directory replays
	// its log, and until then holds an old map (or none).
	return callLeader(ctx, g.m, func() (*allotpb.ShardMap, error) {
		if !g.m.Leading() {
			return nil, ErrNotServing
		}
		m := g.Map()
		if req.GetKnownVersion() >= m.Version && m.Version > 0 {
			return &allotpb.ShardMap{Version: m.Version}, nil
		}
		return m.Proto(), nil
	}, func(ctx context.Context, addr string) (*allotpb.ShardMap, error) {
		return allotpb.NewShardServiceClient(g.m.Conn(addr)).GetShardMap(ctx, req)
	})
}

func (s *shardServer) AddGroup(ctx context.Context, req *allotpb.AddGroupRequest) (*allotpb.ShardMap, error) {
	g := s.g
	if !g.IsHome() {
		return nil, g.NotHome("AddGroup")
	}
	if err := shard.ValidGroupID(req.GetId()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "id: %v", err)
	}
	if len(req.GetCoordinators()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "coordinators: a group needs at least one member's gRPC address")
	}
	if req.GetId() == g.ID() {
		return nil, status.Errorf(codes.InvalidArgument, "id: %q is the home group", req.GetId())
	}
	out, err := callLeader(ctx, g.m, func() (*allotpb.ShardMap, error) {
		return g.applyShardMap(&fsmpb.ShardMapCommand{AddGroup: &allotpb.ShardGroup{Id: req.GetId(), Coordinators: req.GetCoordinators()}})
	}, func(ctx context.Context, addr string) (*allotpb.ShardMap, error) {
		return allotpb.NewShardServiceClient(g.m.Conn(addr)).AddGroup(ctx, req)
	})
	return out, g.m.Answer("AddGroup", err)
}

func (s *shardServer) MoveSlots(ctx context.Context, req *allotpb.MoveSlotsRequest) (*allotpb.MoveSlotsResponse, error) {
	g := s.g
	if !g.IsHome() {
		return nil, g.NotHome("MoveSlots")
	}
	if req.GetFirst() > req.GetLast() || req.GetLast() >= shard.Slots {
		return nil, status.Errorf(codes.InvalidArgument, "slots %d..%d are not a range of 0..%d", req.GetFirst(), req.GetLast(), shard.Slots-1)
	}
	out, err := callLeader(ctx, g.m, func() (*allotpb.MoveSlotsResponse, error) {
		m := g.Map()
		mv := &allotpb.SlotMove{First: req.GetFirst(), Last: req.GetLast(), From: m.Owner(shard.Slot(req.GetFirst())), To: req.GetTo(), StartedUnixNano: g.now().UnixNano()}
		pm, err := g.applyShardMap(&fsmpb.ShardMapCommand{Plan: mv})
		if err != nil {
			return nil, err
		}
		g.kickMover()
		return &allotpb.MoveSlotsResponse{Move: pm.GetMoves()[len(pm.GetMoves())-1]}, nil
	}, func(ctx context.Context, addr string) (*allotpb.MoveSlotsResponse, error) {
		return allotpb.NewShardServiceClient(g.m.Conn(addr)).MoveSlots(ctx, req)
	})
	return out, g.m.Answer("MoveSlots", err)
}

func (s *shardServer) PinSlot(ctx context.Context, req *allotpb.PinSlotRequest) (*allotpb.ShardMap, error) {
	g := s.g
	if !g.IsHome() {
		return nil, g.NotHome("PinSlot")
	}
	if req.GetSlot() >= shard.Slots {
		return nil, status.Errorf(codes.InvalidArgument, "slot: %d is not one of 0..%d", req.GetSlot(), shard.Slots-1)
	}
	out, err := callLeader(ctx, g.m, func() (*allotpb.ShardMap, error) {
		return g.applyShardMap(&fsmpb.ShardMapCommand{Pin: req})
	}, func(ctx context.Context, addr string) (*allotpb.ShardMap, error) {
		return allotpb.NewShardServiceClient(g.m.Conn(addr)).PinSlot(ctx, req)
	})
	return out, g.m.Answer("PinSlot", err)
}

func (s *shardServer) GroupSlots(ctx context.Context, req *allotpb.GroupSlotsRequest) (*allotpb.GroupSlotsResponse, error) {
	g := s.g
	if req.GetGroup() != g.ID() {
		return nil, status.Errorf(codes.FailedPrecondition, "this is shard group %q, not %q", g.ID(), req.GetGroup())
	}
	return callLeader(ctx, g.m, func() (*allotpb.GroupSlotsResponse, error) { return g.groupStep(req) },
		func(ctx context.Context, addr string) (*allotpb.GroupSlotsResponse, error) {
			return allotpb.NewShardServiceClient(g.m.Conn(addr)).GroupSlots(ctx, req)
		})
}

func (s *shardServer) SlotLoad(ctx context.Context, req *allotpb.SlotLoadRequest) (*allotpb.SlotLoadResponse, error) {
	g := s.g
	return callLeader(ctx, g.m, func() (*allotpb.SlotLoadResponse, error) {
		if !g.m.Leading() {
			return nil, ErrNotServing
		}
		out := &allotpb.SlotLoadResponse{Group: g.ID(), Leader: g.cfg.NodeID, SinceUnixNano: g.load.since.Load(), NowUnixNano: g.now().UnixNano(), Entries: map[uint32]uint64{}}
		for i := range g.load.entries {
			if n := g.load.entries[i].Load(); n > 0 {
				out.Entries[uint32(i)] = n
			}
		}
		return out, nil
	}, func(ctx context.Context, addr string) (*allotpb.SlotLoadResponse, error) {
		return allotpb.NewShardServiceClient(g.m.Conn(addr)).SlotLoad(ctx, req)
	})
}
