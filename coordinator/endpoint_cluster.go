package coordinator

import (
	"context"
	"strconv"
	"time"

	"github.com/allot-io/allot/coordinator/internal/state"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

type clusterServer struct {
	allotpb.UnimplementedClusterServiceServer
	c *Coordinator
}

func (s *clusterServer) Status(context.Context, *allotpb.StatusRequest) (*allotpb.StatusResponse, error) {
	return s.c.Status(), nil
}

func (s *clusterServer) Join(ctx context.Context, req *allotpb.JoinRequest) (*allotpb.JoinResponse, error) {
	c := s.c
	resp, err := onLeader(ctx, c, func() (*allotpb.JoinResponse, error) {
		return c.addMember(ctx, req)
	}, func(ctx context.Context, addr string) (*allotpb.JoinResponse, error) {
		return c.peers.cluster(addr).Join(ctx, req)
	})
	c.metrics.adminRequests.WithLabelValues("Join", resultLabel(err)).Inc()
	if err != nil {
		return nil, grpcError(err)
	}
	resp.Members = c.members()
	return resp, nil
}

// Identify says what this member is, leader or not: for members forming a
// cluster (--bootstrap-expect), joining one, or checking they still
// belong to one.
func (s *clusterServer) Identify(context.Context, *allotpb.IdentifyRequest) (*allotpb.IdentifyResponse, error) {
	return s.c.identify(), nil
}

func (s *clusterServer) Remove(ctx context.Context, req *allotpb.RemoveRequest) (*allotpb.RemoveResponse, error) {
	c := s.c
	_, err := onLeader(ctx, c, func() (*allotpb.RemoveResponse, error) {
		return &allotpb.RemoveResponse{}, c.removeMember(ctx, req.GetId())
	}, func(ctx context.Context, addr string) (*allotpb.RemoveResponse, error) {
		return c.peers.cluster(addr).Remove(ctx, req)
	})
	c.metrics.adminRequests.WithLabelValues("Remove", resultLabel(err)).Inc()
	if err != nil {
		return nil, grpcError(err)
	}
	return &allotpb.RemoveResponse{Members: c.members()}, nil
}

// Status describes this member and the cluster as it sees them.
func (c *Coordinator) Status() *allotpb.StatusResponse {
	stats := c.raft.Stats()
	parse := func(k string) uint64 { v, _ := strconv.ParseUint(stats[k], 10, 64); return v }
	leaderID, leaderAddr := c.Leader()
	now := c.now().UnixNano()
	st := &allotpb.StatusResponse{
		Id: c.cfg.NodeID, Region: c.cfg.Region, State: c.raft.State().String(),
		LeaderId: leaderID, LeaderGrpcAddress: leaderAddr,
		Term: parse("term"), AppliedIndex: parse("applied_index"), CommitIndex: parse("commit_index"),
		Members: c.members(), ClusterId: c.clusterID(),
	}
	if c.leading.Load() {
		st.Learning = c.alloc.Learning(now)
		st.Agents = uint32(c.alloc.NodeCount(now))
		active := c.alloc.ActiveKeys()
		st.ActiveKeys = uint64(active)
	}
	c.fsm.Read(func(s *state.State) {
		st.Epoch, st.Rules, st.RulesVersion = s.Epoch(), uint32(s.Rules().Len()), s.Rules().Version()
		st.Ledger = ledgerStatus(s, c.sink != nil)
		if s.Group() != "" || !c.isHome() || s.ShardMapVersion() > 0 {
			st.Shards = &allotpb.ShardStatus{Group: c.groupID(), Home: c.isHome(), OwnedSlots: uint32(s.OwnedSlots()), MapVersion: s.ShardMapVersion()}
		}
	})
	if f := c.exportFailing.Load(); f != nil && st.Ledger != nil {
		st.Ledger.ExportError, st.Ledger.ExportErrorCause, st.Ledger.ExportFailures = f.err, f.cause, f.rounds
		st.Ledger.ExportFailingSince, st.Ledger.ExportLastFailure = timestamppb.New(f.since), timestamppb.New(f.last)
	}
	st.Tier = c.tierStatus(now)
	return st
}

func ledgerStatus(s *state.State, sink bool) *allotpb.LedgerStatus {
	pos := s.Exported()
	out := &allotpb.LedgerStatus{
		Lines: uint64(s.LedgerLen()), RetentionDropped: s.RetentionDropped(), Sink: sink,
		ExportedLines: pos.Lines, ExportedBatches: pos.Batches,
	}
	if pos.Set {
		out.ExportedThroughWindow = timestamppb.New(time.Unix(pos.Last.Window, 0))
		out.ExportedThroughTenant, out.ExportedThroughRule, out.ExportedThroughRegion = pos.Last.Tenant, pos.Last.Rule, pos.Last.Region
	}
	return out
}
