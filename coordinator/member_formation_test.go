package coordinator

import (
	"fmt"
	"github.com/allot-io/allot/internal/testwait"
	"slices"
	"strings"
	"testing"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/raft"
)

func fresh(id string, expect uint32, forming ...string) *allotpb.IdentifyResponse {
	return &allotpb.IdentifyResponse{Id: id, RaftAddress: id + ":7300", State: allotpb.DataState_DATA_STATE_FRESH, BootstrapExpect: expect, Forming: forming}
}

func TestDecideFormation(t *testing.T) {
	a := formSelf{id: "a", raftAddr: "a:7300", expect: 3}
	lost := a
	lost.lost = true
	bootstrapped := &allotpb.IdentifyResponse{Id: "b", State: allotpb.DataState_DATA_STATE_EXISTING, Members: []*allotpb.Member{
		{Id: "a", RaftAddress: "a:7300", Voter: true}, {Id: "b", RaftAddress: "b:7300", Voter: true}, {Id: "c", RaftAddress: "c:7300", Voter: true},
	}}
	for _, tc := range []struct {
		name    string
		self    formSelf
		peers   []*allotpb.IdentifyResponse
		want    formAction
		servers []string // IDs, in order
		reason  string
	}{
		{"alone", a, nil, formWait, nil, "found 1 of 3"},
		{"two of three", a, []*allotpb.IdentifyResponse{fresh("b", 3)}, formWait, nil, "found 2 of 3"},
		{"all three, views differ", a, []*allotpb.IdentifyResponse{fresh("b", 3, "a", "b"), fresh("c", 3, "a", "b", "c")}, formWait, nil, "until each sees the same"},
		{"all three agree", a, []*allotpb.IdentifyResponse{fresh("c", 3, "a", "b", "c"), fresh("b", 3, "a", "b", "c")}, formBootstrap, []string{"a", "b", "c"}, "agree"},
		{"expect differs", a, []*allotpb.IdentifyResponse{fresh("b", 5, "a", "b", "c"), fresh("c", 3, "a", "b", "c")}, formWait, nil, "b expects 5"},
		{"too many", a, []*allotpb.IdentifyResponse{fresh("b", 3), fresh("c", 3), fresh("d", 3)}, formWait, nil, "refusing to choose"},
		{"a peer in a cluster", a, []*allotpb.IdentifyResponse{fresh("b", 3), {Id: "c", ClusterId: "k1", State: allotpb.DataState_DATA_STATE_EXISTING}}, formJoin, nil, "belongs to cluster k1"},
		{"a peer bootstrapped with this member", a, []*allotpb.IdentifyResponse{bootstrapped}, formBootstrap, []string{"a", "b", "c"}, "names this member"},
		{"a peer with state without this member", formSelf{id: "d", expect: 3}, []*allotpb.IdentifyResponse{bootstrapped}, formJoin, nil, "without this member"},
		{"lost, peers fresh", lost, []*allotpb.IdentifyResponse{fresh("b", 3, "a", "b", "c"), fresh("c", 3, "a", "b", "c")}, formWait, nil, "never forms a new one"},
		{"lost, a peer forming", lost, []*allotpb.IdentifyResponse{bootstrapped}, formWait, nil, "only rejoins"},
		{"lost, its cluster answers", lost, []*allotpb.IdentifyResponse{{Id: "b", ClusterId: "k1", State: allotpb.DataState_DATA_STATE_EXISTING}}, formJoin, nil, "k1"},
		{"a lost peer is not counted", a, []*allotpb.IdentifyResponse{fresh("b", 3, "a", "b", "c"), {Id: "c", State: allotpb.DataState_DATA_STATE_LOST, BootstrapExpect: 3}}, formWait, nil, "found 2 of 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideFormation(tc.self, tc.peers)
			if d.action != tc.want || !strings.Contains(d.reason, tc.reason) {
				t.Fatalf("action %v (%s), want %v with %q", d.action, d.reason, tc.want, tc.reason)
			}
			var ids []string
			for _, s := range d.servers {
				ids = append(ids, string(s.ID))
				if s.Suffrage != raft.Voter || s.Address != raft.ServerAddress(string(s.ID)+":7300") {
					t.Fatalf("server %+v", s)
				}
			}
			if !slices.Equal(ids, tc.servers) {
				t.Fatalf("servers %v, want %v", ids, tc.servers)
			}
		})
	}
}

// formed starts n members with BootstrapExpect n and every member's
// address in Join, as the deployment files do, and waits until they have
// formed one cluster of n voters.
func formed(t *testing.T, n int, dirs []string) ([]*Coordinator, []Config) {
	t.Helper()
	ports := freePorts(t, 2*n)
	var grpcs []string
	for i := range n {
		grpcs = append(grpcs, fmt.Sprintf("127.0.0.1:%d", ports[2*i]))
	}
	var cfgs []Config
	var nodes []*Coordinator
	for i := range n {
		dir := t.TempDir()
		if dirs != nil {
			dir = dirs[i]
		}
		cfg := testConfig(t, fmt.Sprintf("n%d", i+1), dir)
		cfg.GRPCAddr, cfg.RaftAddr = grpcs[i], fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])
		cfg.BootstrapExpect, cfg.Join = n, grpcs
		cfgs = append(cfgs, cfg)
		nodes = append(nodes, start(t, cfg))
	}
	waitVoters(t, nodes, n)
	return nodes, cfgs
}

// waitVoters waits until every running node knows a leader and counts n
// voters, and they agree on the cluster ID.
func waitVoters(t *testing.T, nodes []*Coordinator, n int) {
	t.Helper()
	testwait.For(t, 30*time.Second, fmt.Sprintf("%d voters and one cluster ID", n), func() bool {
		ids := map[string]bool{}
		for _, c := range nodes {
			if c.closed.Load() {
				continue
			}
			if id, _ := c.Leader(); id == "" || voters(c.members()) != n || c.clusterID() == "" {
				return false
			}
			ids[c.clusterID()] = true
		}
		return len(ids) == 1 && leader(nodes) != nil
	})
}

func TestBootstrapExpectForms(t *testing.T) {
	nodes, _ := formed(t, 3, nil)
	cid := nodes[0].clusterID()
	testwait.For(t, 10*time.Second, "every identity file", func() bool {
		for _, c := range nodes {
			id, err := datadirIdentity(c)
			if err != nil || id == nil || id.ClusterID != cid || id.NodeID != c.ID() {
				return false
			}
		}
		return true
	})
}

func TestBootstrapExpectWaitsForEveryone(t *testing.T) {
	// Two of three started: no cluster, however long they wait.
	grpcs := []string{fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	var nodes []*Coordinator
	for i := range 2 {
		cfg := testConfig(t, fmt.Sprintf("n%d", i+1), t.TempDir())
		cfg.GRPCAddr, cfg.BootstrapExpect, cfg.Join = grpcs[i], 3, grpcs
		nodes = append(nodes, start(t, cfg))
	}
	testwait.For(t, 10*time.Second, "both to see each other", func() bool {
		for _, c := range nodes {
			c.formingMu.Lock()
			n := len(c.forming)
			c.formingMu.Unlock()
			if n != 2 {
				return false
			}
		}
		return true
	})
	for _, c := range nodes {
		if c.raft.LastIndex() != 0 || c.raft.State() == raft.Leader {
			t.Fatalf("%s formed a cluster with two of three: last index %d, %v", c.ID(), c.raft.LastIndex(), c.raft.State())
		}
	}
	// The third arrives: the three form.
	cfg := testConfig(t, "n3", t.TempDir())
	cfg.GRPCAddr, cfg.BootstrapExpect, cfg.Join = grpcs[2], 3, grpcs
	nodes = append(nodes, start(t, cfg))
	waitVoters(t, nodes, 3)
}
