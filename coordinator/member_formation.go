package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/raft"
)

// Forming a new cluster with --bootstrap-expect N (Consul's
// bootstrap_expect is the model): every member is started with the same
// flags, N and the gRPC addresses of all of them in --join. A member with
// no state asks each address what it is (ClusterService.Identify) and
//
//   - joins, if any of them belongs to a cluster;
//   - bootstraps with the configuration a peer already bootstrapped with,
//     if that peer has no cluster ID yet (the cluster is being formed) and
//     its configuration names this member;
//   - bootstraps a cluster of exactly the N fresh members it found, once
//     each of them reports the same N members as its own view;
//   - otherwise waits, and never forms a cluster alone or with fewer than
//     N: a member that lost its disk while the others are out of reach
//     stays without a leader rather than becoming a second cluster.
//
// A member whose data dir says it lost its state never forms a cluster: it
// only rejoins the one it belonged to.

// formAction is what a member with no state does next.
type formAction int

const (
	formWait formAction = iota
	formJoin
	formBootstrap
)

// formDecision is what decideFormation chose, and why.
type formDecision struct {
	action  formAction
	servers []raft.Server // to bootstrap with
	view    []string      // the fresh members this one would form with, sorted
	reason  string
}

// formSelf is the member deciding.
type formSelf struct {
	id, raftAddr string
	expect       int
	lost         bool
}

// decideFormation is the rule above, a pure function of what the peers
// answered (those that could not be reached are absent).
func decideFormation(self formSelf, peers []*allotpb.IdentifyResponse) formDecision {
	for _, p := range peers {
		if p.GetClusterId() != "" {
			return formDecision{action: formJoin, reason: fmt.Sprintf("%s belongs to cluster %s", p.GetId(), p.GetClusterId())}
		}
	}
	for _, p := range peers {
		if p.GetState() != allotpb.DataState_DATA_STATE_EXISTING {
			continue
		}
		var servers []raft.Server
		named := false
		for _, m := range p.GetMembers() {
			s := raft.Nonvoter
			if m.GetVoter() {
				s = raft.Voter
			}
			servers = append(servers, raft.Server{Suffrage: s, ID: raft.ServerID(m.GetId()), Address: raft.ServerAddress(m.GetRaftAddress())})
			named = named || m.GetId() == self.id
		}
		switch {
		case !named:
			return formDecision{action: formJoin, reason: fmt.Sprintf("%s has Raft state without this member", p.GetId())}
		case self.lost:
			return formDecision{action: formWait, reason: fmt.Sprintf("%s is forming a new cluster, but this member lost its state in another one and only rejoins that", p.GetId())}
		}
		return formDecision{action: formBootstrap, servers: servers, reason: fmt.Sprintf("%s bootstrapped a new cluster that names this member", p.GetId())}
	}
	if self.lost {
		return formDecision{action: formWait, reason: "this member lost its state: it rejoins its cluster and never forms a new one; waiting for a member of its cluster to answer"}
	}
	byID := map[string]*allotpb.IdentifyResponse{}
	var mismatched []string
	for _, p := range peers {
		if p.GetState() != allotpb.DataState_DATA_STATE_FRESH || p.GetId() == self.id {
			continue
		}
		if int(p.GetBootstrapExpect()) != self.expect {
			mismatched = append(mismatched, fmt.Sprintf("%s expects %d", p.GetId(), p.GetBootstrapExpect()))
			continue
		}
		byID[p.GetId()] = p
	}
	view := []string{self.id}
	for id := range byID {
		view = append(view, id)
	}
	slices.Sort(view)
	d := formDecision{view: view}
	if len(mismatched) > 0 {
		d.reason = fmt.Sprintf("not counted, --bootstrap-expect differs (%s, this member %d); ", strings.Join(mismatched, ", "), self.expect)
	}
	switch {
	case len(view) < self.expect:
		d.reason += fmt.Sprintf("found %d of %d fresh members (%s); waiting for the rest", len(view), self.expect, strings.Join(view, ", "))
		return d
	case len(view) > self.expect:
		d.reason += fmt.Sprintf("found %d fresh members (%s) expecting %d: refusing to choose; give every member the same --join list of exactly %d", len(view), strings.Join(view, ", "), self.expect, self.expect)
		return d
	}
	for _, p := range byID {
		if !slices.Equal(p.GetForming(), view) {
			d.reason += fmt.Sprintf("found all %d fresh members (%s); waiting until each sees the same", len(view), strings.Join(view, ", "))
			return d
		}
	}
	// Every member bootstraps with the same configuration, in ID order.
	d.action = formBootstrap
	for _, id := range view {
		addr := self.raftAddr
		if p := byID[id]; p != nil {
			addr = p.GetRaftAddress()
		}
		d.servers = append(d.servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
	}
	d.reason = fmt.Sprintf("the %d fresh members %s agree", len(view), strings.Join(view, ", "))
	return d
}

// formCluster runs the rule until this member has a log, then joins
// (which promotes it if it was added without a vote).
func (c *Coordinator) formCluster(ctx context.Context) {
	self := formSelf{id: c.cfg.NodeID, raftAddr: c.raftAddr, expect: c.cfg.BootstrapExpect, lost: c.startState == allotpb.DataState_DATA_STATE_LOST}
	lastReason := ""
	lastLog := time.Time{}
	for {
		if c.raft.LastIndex() > 0 { // bootstrapped, or a leader reached it
			c.setForming(nil)
			c.joinCluster(ctx)
			return
		}
		d := decideFormation(self, c.identifyPeers(ctx, c.cfg.Join))
		c.setForming(d.view)
		switch d.action {
		case formJoin:
			c.setForming(nil)
			c.log.Info("joining an existing cluster", "reason", d.reason)
			c.joinCluster(ctx)
			return
		case formBootstrap:
			c.log.Info("forming a new cluster", "reason", d.reason, "members", fmt.Sprint(d.servers))
			if err := c.raft.BootstrapCluster(raft.Configuration{Servers: d.servers}).Error(); err != nil {
				c.log.Warn("bootstrap failed", "error", err)
			}
			continue
		}
		if d.reason != lastReason || time.Since(lastLog) > 30*time.Second {
			c.log.Info("not forming a cluster yet", "reason", d.reason)
			lastReason, lastLog = d.reason, time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (c *Coordinator) setForming(view []string) {
	c.formingMu.Lock()
	c.forming = view
	c.formingMu.Unlock()
}

// identifyPeers asks each address but this member's own what it is; those
// that do not answer within a second are left out.
func (c *Coordinator) identifyPeers(ctx context.Context, addrs []string) []*allotpb.IdentifyResponse {
	var out []*allotpb.IdentifyResponse
	for _, addr := range addrs {
		if c.isSelf(addr) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := c.peers.cluster(addr).Identify(withToken(cctx, c.joinToken()), &allotpb.IdentifyRequest{FromId: c.cfg.NodeID})
		cancel()
		if err == nil && resp.GetId() != c.cfg.NodeID {
			out = append(out, resp)
		}
	}
	return out
}

// identify is this member's answer to Identify.
func (c *Coordinator) identify() *allotpb.IdentifyResponse {
	_, leader := c.raft.LeaderWithID()
	resp := &allotpb.IdentifyResponse{
		Id: c.cfg.NodeID, RaftAddress: c.raftAddr, GrpcAddress: c.AdvertisedGRPCAddr(),
		ClusterId: c.clusterID(), State: c.dataState(), BootstrapExpect: uint32(max(c.cfg.BootstrapExpect, 0)),
		LeaderId: string(leader), LastIndex: c.raft.LastIndex(),
	}
	c.formingMu.Lock()
	resp.Forming = slices.Clone(c.forming)
	c.formingMu.Unlock()
	if f := c.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			resp.Members = append(resp.Members, &allotpb.Member{Id: string(s.ID), RaftAddress: string(s.Address), Voter: s.Suffrage == raft.Voter})
		}
	}
	return resp
}
