package coordinator

import (
	"errors"
	"fmt"
	"time"

	"github.com/allot-io/allot/coordinator/datadir"
	"github.com/allot-io/allot/coordinator/internal/fsm"
	"github.com/allot-io/allot/coordinator/internal/fsm/state"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// ErrNothingToRecover is returned by Recover for a data dir with no Raft
// state.
var ErrNothingToRecover = errors.New("coordinator: no Raft state to recover")

// RecoverConfig names the member Recover turns into a one-member cluster.
type RecoverConfig struct {
	DataDir, NodeID string
	// RaftAddr is the Raft address the member will listen on; empty keeps
	// the one the cluster's configuration records for it.
	RaftAddr string
	// Logger receives Raft's logs; nil discards them.
	Logger hclog.Logger
}

// RecoverResult is what the recovered member holds.
type RecoverResult struct {
	ClusterID string
	RaftAddr  string
	// LastIndex is the last log entry it had, now in its snapshot.
	LastIndex uint64
	// Dropped are the members the configuration counted besides it.
	Dropped []string
	// LedgerLines, Rules and Agents describe its state.
	LedgerLines, Rules, Agents int
}

// Recover turns a stopped member whose cluster lost its quorum for good
// into a cluster of one, with its log and ledger intact, through Raft's
// RecoverCluster (the mechanism of Consul's peers.json outage recovery):
// it applies every entry in its log, snapshots the state with a
// configuration naming only itself, and compacts the log. Started again
// with the same flags, the member leads alone; new members then join it.
//
// Entries that the lost members had committed but this one never received
// are gone: units agents were told were recorded after this member's last
// entry are not in the ledger. Run it on the surviving member with the
// highest last index (allot status showed it, and Recover says it).
func Recover(rc RecoverConfig) (*RecoverResult, error) {
	if rc.Logger == nil {
		rc.Logger = hclog.NewNullLogger()
	}
	st, err := datadir.Open(datadir.Options{Dir: rc.DataDir, NodeID: rc.NodeID, CheckEntry: fsm.CheckEntry, Logger: rc.Logger})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if st.State != datadir.Existing {
		return nil, fmt.Errorf("%w in %s (it is %v): there is nothing to recover from; see %s", ErrNothingToRecover, rc.DataDir, st.State, datadir.RunbookQuorum)
	}
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(rc.NodeID)
	conf.Logger = rc.Logger
	conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	_, probe := raft.NewInmemTransport("")
	current, err := raft.GetConfiguration(conf, fsm.New(rc.Logger, nil), st.Log, st.Log, st.Snapshots, probe)
	if err != nil {
		return nil, fmt.Errorf("coordinator: reading the cluster's configuration from %s: %w", rc.DataDir, err)
	}
	res := &RecoverResult{RaftAddr: rc.RaftAddr, LastIndex: max(st.LastIndex, st.SnapshotIndex)}
	for _, s := range current.Servers {
		if string(s.ID) == rc.NodeID {
			if res.RaftAddr == "" {
				res.RaftAddr = string(s.Address)
			}
			continue
		}
		res.Dropped = append(res.Dropped, string(s.ID))
	}
	if res.RaftAddr == "" {
		return nil, fmt.Errorf("coordinator: %s is not in the configuration recorded in %s and no Raft address was given: give the one it will listen on", rc.NodeID, rc.DataDir)
	}
	f := fsm.New(rc.Logger, nil)
	_, trans := raft.NewInmemTransport(raft.ServerAddress(res.RaftAddr))
	one := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(rc.NodeID), Address: raft.ServerAddress(res.RaftAddr)}}}
	if err := raft.RecoverCluster(conf, f, st.Log, st.Log, st.Snapshots, trans, one); err != nil {
		return nil, fmt.Errorf("coordinator: recovering %s: %w", rc.DataDir, err)
	}
	f.Read(func(s *state.State) {
		res.ClusterID, res.LedgerLines, res.Rules, res.Agents = s.ClusterID(), s.LedgerLen(), s.Rules().Len(), s.IncarnationLen()
	})
	return res, nil
}
