package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/allot-io/allot/coordinator/datadir"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/hashicorp/raft"
)

// Failed is closed when this member must stop: it was removed from its
// cluster, or its data dir belongs to another cluster. Err says why. The
// member keeps serving nothing it should not (it has no leader and no
// vote); the process running it should Close it and exit.
func (c *Coordinator) Failed() <-chan struct{} { return c.failed }

// Err is why Failed was closed, or nil.
func (c *Coordinator) Err() error {
	select {
	case <-c.failed:
		return c.failErr
	default:
		return nil
	}
}

// fail records why this member must stop, once, and says so at ERROR.
func (c *Coordinator) fail(err error) {
	c.failOnce.Do(func() {
		c.failErr = err
		c.log.Error("this member must be stopped", "error", err)
		close(c.failed)
	})
}

// knownClusterID is the cluster this member belongs to: its identity
// file's, or the replicated one.
func (c *Coordinator) knownClusterID() string {
	c.identityMu.Lock()
	id := c.identity
	c.identityMu.Unlock()
	if id != nil {
		return id.ClusterID
	}
	return c.clusterID()
}

// syncIdentity writes the identity file once the cluster's ID is known,
// and refuses state that belongs to another cluster than the file names.
func (c *Coordinator) syncIdentity() error {
	cid := c.clusterID()
	if cid == "" {
		return nil
	}
	c.identityMu.Lock()
	defer c.identityMu.Unlock()
	if c.identity != nil {
		if c.identity.ClusterID != cid {
			return fmt.Errorf("%w: %s names cluster %s, but this member holds the state of cluster %s; see %s", ErrNotMember, c.cfg.DataDir+"/identity.json", c.identity.ClusterID, cid, datadir.RunbookLostDisk)
		}
		if c.identity.Region != "" {
			return nil
		}
		// Written by a release that did not record the region: the
		// region this member serves is recorded now.
	}
	id := datadir.Identity{ClusterID: cid, NodeID: c.cfg.NodeID, Region: c.cfg.Region, Written: c.now().UTC()}
	if err := datadir.WriteIdentity(c.cfg.DataDir, id); err != nil {
		c.log.Warn("could not write the identity file; retrying", "error", err)
		return nil
	}
	c.identity = &id
	c.log.Info("identity recorded", "cluster", cid)
	return nil
}

// removedAfter is how long a member with state goes without a leader
// before it asks the others whether it is still one of them.
func (c *Coordinator) removedAfter() time.Duration {
	return max(5*time.Second, 5*c.cfg.ElectionTimeout)
}

// watchMembership keeps the identity file, and while this member has
// state but no leader, checks that its cluster still counts it: a removed
// member hears from no leader again and would wait forever.
func (c *Coordinator) watchMembership(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var leaderless time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.syncIdentity(); err != nil {
			c.fail(err)
			return
		}
		if _, id := c.raft.LeaderWithID(); id != "" || c.raft.LastIndex() == 0 {
			leaderless = time.Time{}
			continue
		}
		if leaderless.IsZero() {
			leaderless = time.Now()
			continue
		}
		if time.Since(leaderless) < c.removedAfter() {
			continue
		}
		if by := c.removedBy(ctx); by != "" {
			c.fail(fmt.Errorf("%w: %s, so it hears from no leader; stop it, and to add it back, empty its --data-dir and start it with --join (docs/operations.md#adding-a-member)", ErrNotMember, by))
			return
		}
		leaderless = time.Now()
	}
}

// removedBy says who shows that this member was removed: its own
// configuration, or a member that follows a leader and does not count it;
// "" when nothing shows it.
func (c *Coordinator) removedBy(ctx context.Context) string {
	inConfig := func(servers []raft.Server) bool {
		for _, s := range servers {
			if s.ID == raft.ServerID(c.cfg.NodeID) {
				return true
			}
		}
		return false
	}
	if f := c.raft.GetConfiguration(); f.Error() == nil {
		if servers := f.Configuration().Servers; len(servers) > 0 && !inConfig(servers) {
			return "its own log shows it was removed from the cluster"
		}
	}
	addrs := append([]string(nil), c.cfg.Join...)
	c.fsm.Read(func(s *state.State) {
		for _, m := range s.Members() {
			if a := m.GetGrpcAddress(); a != "" && m.GetId() != c.cfg.NodeID {
				addrs = append(addrs, a)
			}
		}
	})
	cid := c.clusterID()
	for _, p := range c.identifyPeers(ctx, addrs) {
		if p.GetLeaderId() == "" || len(p.GetMembers()) == 0 || (cid != "" && p.GetClusterId() != cid) {
			continue
		}
		counted := false
		for _, m := range p.GetMembers() {
			counted = counted || m.GetId() == c.cfg.NodeID
		}
		if !counted {
			return fmt.Sprintf("%s, which follows leader %s, does not count it among the members: it was removed", p.GetId(), p.GetLeaderId())
		}
	}
	return ""
}
