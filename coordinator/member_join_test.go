package coordinator

import (
	"bytes"
	"context"
	"errors"
	"github.com/allot-io/allot/internal/testwait"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/datadir"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func datadirIdentity(c *Coordinator) (*datadir.Identity, error) {
	return datadir.ReadIdentity(c.cfg.DataDir)
}

// wipeRaftState deletes a stopped member's Raft log and snapshots,
// keeping (keepIdentity) or deleting its identity file: a lost disk.
func wipeRaftState(t *testing.T, dir string, keepIdentity bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if keepIdentity && e.Name() == "identity.json" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

func TestJoinWithoutAVoteUntilCaughtUp(t *testing.T) {
	nodes := cluster(t, 1, nil)
	l := nodes[0]
	putRules(t, l, &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "gcra", Limit: 100, Period: durationpb.New(time.Second), Intent: "capacity"})
	cfg := testConfig(t, "n2", t.TempDir())
	cfg.Join = []string{l.GRPCAddr()}
	n2 := start(t, cfg)
	// Added first without a vote (the leader logs it), then promoted.
	testwait.For(t, 30*time.Second, "n2 promoted to a voter", func() bool { return voters(l.members()) == 2 })
	if n2.raft.AppliedIndex() == 0 || n2.currentRulesLen() != 1 {
		t.Fatalf("n2 promoted with applied index %d and %d rules", n2.raft.AppliedIndex(), n2.currentRulesLen())
	}
}

func (c *Coordinator) currentRulesLen() int { return c.currentRules().Len() }

// TestLostMemberRejoins: a member whose data dir lost its Raft state (its
// identity kept, then gone too) rejoins its cluster: it never votes
// before it has the cluster's log, never bootstraps, and the cluster's
// state reaches it again.
func TestLostMemberRejoins(t *testing.T) {
	for _, keepIdentity := range []bool{true, false} {
		t.Run(map[bool]string{true: "identity kept", false: "whole dir gone"}[keepIdentity], func(t *testing.T) {
			nodes, cfgs := formed(t, 3, nil)
			l := waitLeader(t, nodes)
			putRules(t, l, &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "gcra", Limit: 100, Period: durationpb.New(time.Second), Intent: "capacity"})
			var victim int
			for i, c := range nodes {
				if c != l {
					victim = i
				}
			}
			testwait.For(t, 10*time.Second, "the victim's identity file", func() bool {
				id, err := datadirIdentity(nodes[victim])
				return err == nil && id != nil
			})
			stop(nodes[victim])
			wipeRaftState(t, cfgs[victim].DataDir, keepIdentity)
			back := start(t, cfgs[victim])
			if want := map[bool]allotpb.DataState{true: allotpb.DataState_DATA_STATE_LOST, false: allotpb.DataState_DATA_STATE_FRESH}[keepIdentity]; back.startState != want {
				t.Fatalf("start state %v, want %v", back.startState, want)
			}
			nodes[victim] = back
			waitVoters(t, nodes, 3)
			testwait.For(t, 10*time.Second, "the rules on the rejoined member", func() bool { return back.currentRulesLen() == 1 })
		})
	}
}

func TestVoteGateRefusesWithoutState(t *testing.T) {
	cfg := testConfig(t, "n1", t.TempDir()) // no bootstrap, no join: no state
	c := start(t, cfg)
	var resp raft.RequestVoteResponse
	err := c.transport.RequestVote("n1", raft.ServerAddress(c.RaftAddr()), &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("x"), Addr: []byte("127.0.0.1:1")},
		Term:      5, LastLogIndex: 10, LastLogTerm: 5,
	}, &resp)
	if err != nil || resp.Granted {
		t.Fatalf("RequestVote to a member without state: err %v, granted %v", err, resp.Granted)
	}
}

func TestBootstrapRefusedWhenLost(t *testing.T) {
	dir := t.TempDir()
	if err := datadir.WriteIdentity(dir, datadir.Identity{ClusterID: "k1", NodeID: "n1", Written: time.Now()}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "n1", dir)
	cfg.Bootstrap = true
	_, err := New(cfg)
	if !errors.Is(err, ErrWouldSplit) || !strings.Contains(err.Error(), "k1") || !strings.Contains(err.Error(), "runbook") {
		t.Fatalf("New = %v, want ErrWouldSplit naming the cluster and the runbook", err)
	}
}

func TestRemovedMemberStops(t *testing.T) {
	nodes, cfgs := formed(t, 3, nil)
	l := waitLeader(t, nodes)
	var victim int
	for i, c := range nodes {
		if c != l {
			victim = i
		}
	}
	if err := l.removeMember(context.Background(), nodes[victim].ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-nodes[victim].Failed():
	case <-time.After(30 * time.Second):
		t.Fatal("the removed member never said it must stop")
	}
	if err := nodes[victim].Err(); !errors.Is(err, ErrNotMember) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("Err = %v", err)
	}
	stop(nodes[victim])
	// Restarted with its old data and --join: refused, and it stops again.
	cfg := cfgs[victim]
	cfg.BootstrapExpect = 0
	cfg.Join = []string{l.GRPCAddr()}
	again := start(t, cfg)
	select {
	case <-again.Failed():
	case <-time.After(30 * time.Second):
		t.Fatal("the removed member rejoined with its old data")
	}
	if err := again.Err(); !errors.Is(err, ErrNotMember) || !strings.Contains(err.Error(), "empty its --data-dir") {
		t.Fatalf("Err = %v", err)
	}
	if voters(l.members()) != 2 {
		t.Fatalf("members %v", l.members())
	}
}

func TestJoinFromAnotherClusterRefused(t *testing.T) {
	a := cluster(t, 1, nil)[0]
	testwait.For(t, 10*time.Second, "a cluster ID", func() bool { return a.clusterID() != "" })
	dir := t.TempDir()
	if err := datadir.WriteIdentity(dir, datadir.Identity{ClusterID: "another", NodeID: "n9"}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "n9", dir)
	cfg.Join = []string{a.GRPCAddr()}
	c := start(t, cfg)
	select {
	case <-c.Failed():
	case <-time.After(30 * time.Second):
		t.Fatal("a member of another cluster joined")
	}
	if err := c.Err(); !strings.Contains(err.Error(), "belongs to cluster another") {
		t.Fatalf("Err = %v", err)
	}
}

func TestRestoreRefusesAClusterWithState(t *testing.T) {
	l := cluster(t, 1, nil)[0]
	var backup bytes.Buffer
	client := allotpb.NewClusterServiceClient(dial(t, l.GRPCAddr()))
	putRules(t, l, &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "gcra", Limit: 100, Period: durationpb.New(time.Second), Intent: "capacity"})
	if _, err := BackupTo(context.Background(), client, &backup); err != nil {
		t.Fatal(err)
	}
	cid := l.clusterID()
	for _, force := range []string{"", "not-it"} {
		_, err := RestoreFrom(context.Background(), client, bytes.NewReader(backup.Bytes()), force)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--force "+cid) || !strings.Contains(err.Error(), "1 rule,") {
			t.Fatalf("restore with force %q: %v", force, err)
		}
	}
	if _, err := RestoreFrom(context.Background(), client, bytes.NewReader(backup.Bytes()), cid); err != nil {
		t.Fatalf("forced restore: %v", err)
	}
	if l.clusterID() != cid {
		t.Fatalf("cluster ID %q after restore, want %q kept", l.clusterID(), cid)
	}
}

// TestRecoverLostQuorum: two of three members gone for good; the third,
// recovered, leads alone with its state, and new members join it.
func TestRecoverLostQuorum(t *testing.T) {
	nodes, cfgs := formed(t, 3, nil)
	l := waitLeader(t, nodes)
	putRules(t, l, &allotpb.Rule{Name: "api", Scope: "tenant", Algorithm: "gcra", Limit: 100, Period: durationpb.New(time.Second), Intent: "capacity"})
	cid := l.clusterID()
	survivor := 0
	testwait.For(t, 10*time.Second, "the rules on every member", func() bool {
		for _, c := range nodes {
			if c.currentRulesLen() != 1 {
				return false
			}
		}
		return true
	})
	for _, c := range nodes {
		stop(c)
	}
	for i, cfg := range cfgs {
		in, err := Inspect(cfg.DataDir, cfg.NodeID, 1)
		if err != nil {
			t.Fatalf("Inspect %s: %v", cfg.NodeID, err)
		}
		if in.LastIndex == 0 || in.LastTerm == 0 || len(in.Members) != 3 || in.ClusterID != cid || in.State != "existing" {
			t.Fatalf("Inspect %d: %+v", i, in)
		}
	}
	for _, i := range []int{1, 2} {
		wipeRaftState(t, cfgs[i].DataDir, false)
	}
	res, err := Recover(RecoverConfig{DataDir: cfgs[survivor].DataDir, NodeID: cfgs[survivor].NodeID})
	if err != nil {
		t.Fatal(err)
	}
	if res.ClusterID != cid || len(res.Dropped) != 2 || res.Rules != 1 || res.RaftAddr != cfgs[survivor].RaftAddr {
		t.Fatalf("recovered %+v", res)
	}
	one := start(t, cfgs[survivor])
	waitVoters(t, []*Coordinator{one}, 1)
	if one.currentRulesLen() != 1 || one.clusterID() != cid {
		t.Fatalf("recovered member has %d rules, cluster %q", one.currentRulesLen(), one.clusterID())
	}
	// New members join with fresh data dirs.
	grown := []*Coordinator{one}
	for _, i := range []int{1, 2} {
		cfg := cfgs[i]
		cfg.BootstrapExpect, cfg.Join = 0, []string{one.GRPCAddr()}
		grown = append(grown, start(t, cfg))
	}
	waitVoters(t, grown, 3)
	if _, err := Recover(RecoverConfig{DataDir: t.TempDir(), NodeID: "n1"}); !errors.Is(err, ErrNothingToRecover) {
		t.Fatalf("Recover on an empty dir = %v", err)
	}
}
