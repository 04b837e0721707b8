package coordinator

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/allot-io/allot/coordinator/datadir"
	"github.com/allot-io/allot/coordinator/internal/fsm"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

// Inspection is what a stopped member's data dir holds: enough to choose
// which survivor of a lost quorum to recover (the one with the highest
// last index and term), and to count what another member's log holds
// beyond it.
type Inspection struct {
	NodeID, ClusterID string
	State             string
	// FirstIndex and LastIndex span the log; SnapshotIndex is the
	// snapshot Raft would restore; LastTerm is the term of the last entry
	// (or of the snapshot, with an empty log), CurrentTerm the stable
	// store's.
	FirstIndex, LastIndex, SnapshotIndex uint64
	LastTerm, CurrentTerm                uint64
	// Members is the latest configuration in the log or snapshot.
	Members []*allotpb.Member
	// After, Entries and Usage: the report entries after index After and
	// the usage they carry (before deduplication: an upper bound of what
	// a member that stopped at After lacks).
	After   uint64
	Entries int
	Usage   []*allotpb.UsageCount
}

// snapshotClusterID reads the cluster ID from the header of the snapshot
// Raft would restore, or "".
func snapshotClusterID(st *datadir.Store) string {
	metas, err := st.Snapshots.List()
	if err != nil || len(metas) == 0 {
		return ""
	}
	_, rc, err := st.Snapshots.Open(metas[0].ID)
	if err != nil {
		return ""
	}
	defer rc.Close()
	h, err := state.ReadHeader(rc)
	if err != nil {
		return ""
	}
	return h.GetClusterId()
}

// Inspect reads a stopped member's data dir without changing it, and sums
// the usage in its report entries after index after.
func Inspect(dir, nodeID string, after uint64) (*Inspection, error) {
	st, err := datadir.Open(datadir.Options{Dir: dir, NodeID: nodeID, CheckEntry: fsm.CheckEntry, Logger: hclog.NewNullLogger(), ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	in := &Inspection{NodeID: nodeID, State: st.State.String(), FirstIndex: st.FirstIndex, LastIndex: st.LastIndex, SnapshotIndex: st.SnapshotIndex, After: after}
	if st.Identity != nil {
		in.ClusterID = st.Identity.ClusterID
	}
	in.CurrentTerm, _ = st.Log.GetUint64([]byte("CurrentTerm"))
	// The latest configuration: the snapshot's, then any configuration
	// entry after it. (raft.GetConfiguration would write the stable store.)
	var current raft.Configuration
	if metas, err := st.Snapshots.List(); err == nil && len(metas) > 0 {
		current = metas[0].Configuration
		if in.LastIndex == 0 {
			in.LastIndex, in.LastTerm = metas[0].Index, metas[0].Term
		}
	}
	var l raft.Log
	for i := st.FirstIndex; st.LastIndex > 0 && i <= st.LastIndex; i++ {
		if err := st.Log.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) && i <= st.SnapshotIndex {
				continue // the index of a restored snapshot has no entry
			}
			return nil, fmt.Errorf("coordinator: reading entry %d in %s: %w", i, dir, err)
		}
		if l.Type == raft.LogConfiguration && i > st.SnapshotIndex {
			current = raft.DecodeConfiguration(l.Data)
		}
		if in.ClusterID == "" && l.Type == raft.LogCommand && len(l.Data) > 0 && state.Command(l.Data[0])&^state.Ignorable == state.CmdSettings {
			cmd := &fsmpb.SettingsCommand{}
			if proto.Unmarshal(l.Data[1:], cmd) == nil {
				in.ClusterID = cmd.GetClusterId()
			}
		}
	}
	if in.ClusterID == "" {
		in.ClusterID = snapshotClusterID(st)
	}
	for _, s := range current.Servers {
		in.Members = append(in.Members, &allotpb.Member{Id: string(s.ID), RaftAddress: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	type key struct{ tenant, rule string }
	sums := map[key]*allotpb.UsageCount{}
	for i := max(st.FirstIndex, after+1); st.LastIndex > 0 && i <= st.LastIndex; i++ {
		if err := st.Log.GetLog(i, &l); errors.Is(err, raft.ErrLogNotFound) && i <= st.SnapshotIndex {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("coordinator: reading entry %d in %s: %w", i, dir, err)
		}
		in.LastTerm = l.Term
		if l.Type != raft.LogCommand || len(l.Data) == 0 || state.Command(l.Data[0])&^state.Ignorable != state.CmdReports {
			continue
		}
		cmd := &fsmpb.ReportsCommand{}
		if err := proto.Unmarshal(l.Data[1:], cmd); err != nil {
			return nil, fmt.Errorf("coordinator: entry %d in %s: %w", i, dir, err)
		}
		in.Entries++
		for _, r := range cmd.GetReports() {
			for _, c := range r.GetBatch().GetCounts() {
				k := key{c.GetTenant(), c.GetRule()}
				u := sums[k]
				if u == nil {
					u = &allotpb.UsageCount{Tenant: k.tenant, Rule: k.rule}
					sums[k] = u
				}
				u.Admitted = allotpb.SaturatingAdd(u.Admitted, c.GetAdmitted())
				u.Denied = allotpb.SaturatingAdd(u.Denied, c.GetDenied())
			}
		}
	}
	if in.LastTerm == 0 && st.LastIndex > 0 {
		if err := st.Log.GetLog(st.LastIndex, &l); err == nil {
			in.LastTerm = l.Term
		}
	}
	for _, u := range sums {
		in.Usage = append(in.Usage, u)
	}
	sort.Slice(in.Usage, func(i, j int) bool {
		if in.Usage[i].Tenant != in.Usage[j].Tenant {
			return in.Usage[i].Tenant < in.Usage[j].Tenant
		}
		return in.Usage[i].Rule < in.Usage[j].Rule
	})
	return in, nil
}

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
