package coordinator

import (
	"errors"
	"fmt"
	"sort"

	"github.com/allot-io/allot/coordinator/datadir"
	"github.com/allot-io/allot/coordinator/internal/fsm"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/fsm/state"
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
