package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/allot-io/allot/coordinator/datadir"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// ErrNotMember is the error a member stops with when its cluster does not
// count it: it was removed, or its data dir belongs to another cluster.
// Its state must not come back into the cluster as it is.
var ErrNotMember = errors.New("coordinator: not a member of this cluster")

// errRefusedJoin is a join the leader refuses for good (FailedPrecondition).
var errRefusedJoin = errors.New("coordinator: join refused")

// promoteSlack is how far behind the leader's last index a member added
// without a vote may be and still be promoted: within Raft's trailing logs
// (at least 1024 entries), it catches up from the log, not a snapshot.
const promoteSlack = 1000

// joinCluster asks the members in Join to add this member, and once it is
// added without a vote and has caught up, to promote it; it returns when
// the cluster counts this member as a voter, or stops the member when the
// cluster refuses it for good.
func (c *Coordinator) joinCluster(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		// What it holds now, not at start: a member that was replicated to
		// (or bootstrapped) since has state, and asks as one that has.
		state := c.dataState()
		if state == allotpb.DataState_DATA_STATE_EXISTING && c.votesInOwnConfig() && c.addressesRecorded() {
			return // a restart: a voter whose addresses the cluster has
		}
		req := &allotpb.JoinRequest{
			Id: c.cfg.NodeID, RaftAddress: c.raftAddr, GrpcAddress: c.AdvertisedGRPCAddr(), HttpAddress: c.cfg.advertised(c.HTTPAddr()),
			State: state, ClusterId: c.knownClusterID(), AppliedIndex: c.raft.AppliedIndex(),
		}
		resp, via, err := c.askJoin(ctx, req, attempt)
		switch {
		case err == nil && isVoter(resp.GetMembers(), c.cfg.NodeID):
			c.log.Info("a voting member of the cluster", "via", via, "cluster", resp.GetClusterId())
			return
		case err == nil:
			c.log.Info("added to the cluster without a vote until it has caught up", "via", via, "catch_up_index", resp.GetCatchUpIndex())
			if err := c.waitApplied(ctx, resp.GetCatchUpIndex()); err != nil {
				return
			}
			backoff = 100 * time.Millisecond
			continue
		case errors.Is(err, errRefusedJoin):
			c.fail(fmt.Errorf("%w: %v", ErrNotMember, err))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// askJoin sends req to each address in Join but this member's own, and
// returns the first answer. A refusal for good is errRefusedJoin.
func (c *Coordinator) askJoin(ctx context.Context, req *allotpb.JoinRequest, attempt int) (*allotpb.JoinResponse, string, error) {
	var last error = errors.New("no member to join through")
	for _, addr := range c.cfg.Join {
		if c.isSelf(addr) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := c.peers.cluster(addr).Join(withToken(cctx, c.joinToken()), req)
		cancel()
		if err == nil {
			return resp, addr, nil
		}
		if status.Code(err) == codes.FailedPrecondition {
			return nil, addr, fmt.Errorf("%w by %s: %s", errRefusedJoin, addr, status.Convert(err).Message())
		}
		last = err
		if attempt%10 == 1 {
			c.log.Warn("join failed; retrying", "via", addr, "error", err)
		}
	}
	return nil, "", last
}

// isSelf reports whether addr is this member's own gRPC address.
func (c *Coordinator) isSelf(addr string) bool {
	return addr == c.AdvertisedGRPCAddr() || addr == c.GRPCAddr()
}

// waitApplied waits until this member has applied the log up to index.
func (c *Coordinator) waitApplied(ctx context.Context, index uint64) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for c.raft.AppliedIndex() < index || c.raft.LastIndex() == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// votesInOwnConfig reports whether this member's own Raft configuration
// counts it as a voter.
func (c *Coordinator) votesInOwnConfig() bool {
	f := c.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == raft.ServerID(c.cfg.NodeID) {
			return s.Suffrage == raft.Voter
		}
	}
	return false
}

// addressesRecorded reports whether the replicated member records hold
// this member's current addresses: members that formed the cluster
// together are in its configuration without having joined, and record
// their gRPC and HTTP addresses by joining once.
func (c *Coordinator) addressesRecorded() bool {
	var rec *allotpb.Member
	c.fsm.Read(func(s *state.State) { rec = s.Member(c.cfg.NodeID) })
	me := c.selfMember()
	return rec != nil && rec.GetGrpcAddress() == me.GetGrpcAddress() && rec.GetHttpAddress() == me.GetHttpAddress() && rec.GetRaftAddress() == me.GetRaftAddress()
}

func isVoter(members []*allotpb.Member, id string) bool {
	for _, m := range members {
		if m.GetId() == id {
			return m.GetVoter()
		}
	}
	return false
}

// joinToken is the bearer token this member joins with: its token file's,
// or the admin token; none with member certificates.
func (c *Coordinator) joinToken() string {
	if c.memberToken != nil {
		return c.memberToken.Token()
	}
	return c.cfg.AdminToken
}

// addMember decides a join on the leader:
//   - a member of another cluster, or one holding this cluster's state but
//     not counted in it (it was removed), is refused for good;
//   - a new member, or one that lost its state, is added (or kept) without
//     a vote until it has applied the log up to the catch-up index it is
//     given, then promoted when it asks again;
//   - a member of a version that does not say what it holds is added as a
//     voter at once, as it always was.
//
// A join that changes the configuration or the member's record is in the
// audit log, its action what it did (Join, Promote, Demote, Readdress);
// one that changes nothing (a member asking again) is not.
func (c *Coordinator) addMember(ctx context.Context, req *allotpb.JoinRequest) (*allotpb.JoinResponse, error) {
	if req.GetId() == "" || req.GetRaftAddress() == "" || req.GetGrpcAddress() == "" {
		return nil, fmt.Errorf("%w: join needs id, raft_address and grpc_address", errBadRequest)
	}
	if req.GetId() == c.cfg.NodeID {
		return &allotpb.JoinResponse{ClusterId: c.clusterID()}, nil // the leader itself
	}
	cid := c.clusterID()
	if theirs := req.GetClusterId(); theirs != "" && cid != "" && theirs != cid {
		return nil, status.Errorf(codes.FailedPrecondition, "%s's data dir belongs to cluster %s, not to this cluster %s: give it a data dir of its own to join this one", req.GetId(), theirs, cid)
	}
	cfgF := c.raft.GetConfiguration()
	if err := cfgF.Error(); err != nil {
		return nil, err
	}
	var srv *raft.Server
	for _, s := range cfgF.Configuration().Servers {
		if s.ID == raft.ServerID(req.GetId()) {
			srv = &s
		}
	}
	id, addr := raft.ServerID(req.GetId()), raft.ServerAddress(req.GetRaftAddress())
	resp := &allotpb.JoinResponse{ClusterId: cid}
	var f raft.IndexFuture
	action := ""
	stateless := req.GetState() == allotpb.DataState_DATA_STATE_FRESH || req.GetState() == allotpb.DataState_DATA_STATE_LOST
	switch {
	case srv == nil && req.GetState() == allotpb.DataState_DATA_STATE_EXISTING:
		return nil, status.Errorf(codes.FailedPrecondition, "%s holds Raft state but is not a member of this cluster: it was removed, and a removed member does not come back with its old data; to add it again, stop it, empty its --data-dir and start it with --join (see docs/operations.md#adding-a-member)", req.GetId())
	case srv == nil && (stateless || req.GetNonvoter()):
		c.log.Info("adding a member without a vote until it has caught up", "id", id, "raft", addr)
		f, action = c.raft.AddNonvoter(id, addr, 0, 10*time.Second), "Join"
	case srv == nil:
		f, action = c.raft.AddVoter(id, addr, 0, 10*time.Second), "Join"
	case stateless && srv.Suffrage == raft.Voter:
		c.log.Warn("a member lost its Raft state and rejoins: it has no vote until it has caught up from the leader", "id", id, "raft", addr)
		f, action = c.raft.DemoteVoter(id, 0, 10*time.Second), "Demote"
	case srv.Address != addr && srv.Suffrage == raft.Voter:
		f, action = c.raft.AddVoter(id, addr, 0, 10*time.Second), "Readdress"
	case srv.Address != addr:
		f, action = c.raft.AddNonvoter(id, addr, 0, 10*time.Second), "Readdress"
	case srv.Suffrage != raft.Voter && !req.GetNonvoter() && req.GetState() != allotpb.DataState_DATA_STATE_UNSPECIFIED && !stateless:
		if last := c.raft.LastIndex(); req.GetAppliedIndex()+promoteSlack < last {
			resp.CatchUpIndex = last // not yet: ask again once it has applied this
			break
		}
		c.log.Info("promoting a member that has caught up to a voter", "id", id, "applied", req.GetAppliedIndex())
		f, action = c.raft.AddVoter(id, addr, 0, 10*time.Second), "Promote"
	}
	if f != nil {
		if err := waitFuture(ctx, f); err != nil {
			return nil, fmt.Errorf("coordinator: adding %s: %w", id, err)
		}
		if cfgNow := c.raft.GetConfiguration(); cfgNow.Error() == nil {
			for _, s := range cfgNow.Configuration().Servers {
				if s.ID == id && s.Suffrage != raft.Voter && !req.GetNonvoter() {
					resp.CatchUpIndex = f.Index()
				}
			}
		}
	}
	rec := &allotpb.Member{Id: req.GetId(), RaftAddress: req.GetRaftAddress(), GrpcAddress: req.GetGrpcAddress(), HttpAddress: req.GetHttpAddress()}
	cmd := &fsmpb.MemberCommand{Member: rec}
	var was *allotpb.Member
	c.fsm.Read(func(s *state.State) { was = s.Member(rec.GetId()) })
	if action == "" && !proto.Equal(was, rec) {
		action = "Join"
	}
	if action != "" {
		cmd.Audit = c.auditStamp(ctx, action)
	}
	if _, err := c.apply(ctx, state.CmdMember, cmd, 10*time.Second); err != nil {
		return nil, err
	}
	return resp, nil
}

// removeMember removes a node from the Raft configuration and forgets it;
// the second step records the removal in the audit log.
func (c *Coordinator) removeMember(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: remove needs an id", errBadRequest)
	}
	if err := waitFuture(ctx, c.raft.RemoveServer(raft.ServerID(id), 0, 10*time.Second)); err != nil {
		return fmt.Errorf("coordinator: removing %s: %w", id, err)
	}
	_, err := c.apply(ctx, state.CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: id}, Remove: true, Audit: c.auditStamp(ctx, "Remove")}, 10*time.Second)
	return err
}

// pruneMembers forgets the member records of nodes no longer in the Raft
// configuration: left behind by a removal whose second step failed, or by
// a cluster recovered onto one member (allot cluster recover).
func (c *Coordinator) pruneMembers() error {
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	in := map[string]bool{}
	for _, s := range f.Configuration().Servers {
		in[string(s.ID)] = true
	}
	var stale []string
	c.fsm.Read(func(s *state.State) {
		for _, m := range s.Members() {
			if id := m.GetId(); !in[id] {
				stale = append(stale, id)
			}
		}
	})
	for _, id := range stale {
		if _, err := c.apply(c.ctx, state.CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: id}, Remove: true, Audit: c.selfStamp("Prune")}, 10*time.Second); err != nil {
			return err
		}
		c.log.Info("forgot a member no longer in the Raft configuration", "id", id)
	}
	return nil
}

// members returns the cluster's members as Raft and the FSM know them.
func (c *Coordinator) members() []*allotpb.Member {
	var out []*allotpb.Member
	f := c.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	_, leader := c.raft.LeaderWithID()
	c.fsm.Read(func(s *state.State) {
		for _, srv := range f.Configuration().Servers {
			m := &allotpb.Member{Id: string(srv.ID), RaftAddress: string(srv.Address), Voter: srv.Suffrage == raft.Voter, Leader: srv.ID == leader}
			if meta := s.Member(string(srv.ID)); meta != nil {
				m.GrpcAddress, m.HttpAddress = meta.GetGrpcAddress(), meta.GetHttpAddress()
			}
			out = append(out, m)
		}
	})
	return out
}

// dataState is what this member's data dir holds now, for joins and
// Identify: what it held at start, until it has a log.
func (c *Coordinator) dataState() allotpb.DataState {
	if c.raft.LastIndex() > 0 {
		return allotpb.DataState_DATA_STATE_EXISTING
	}
	return c.startState
}

// protoState maps a data directory's state at start onto the wire's.
func protoState(s datadir.State) allotpb.DataState {
	switch s {
	case datadir.Existing:
		return allotpb.DataState_DATA_STATE_EXISTING
	case datadir.Lost:
		return allotpb.DataState_DATA_STATE_LOST
	}
	return allotpb.DataState_DATA_STATE_FRESH
}
