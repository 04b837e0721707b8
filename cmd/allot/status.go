package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/allot-io/allot/internal/shard"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/allot-io/allot/internal/plural"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
)

const statusAbout = `
Shows the coordinator cluster: every member with its addresses, whether it
votes, its own Raft state, term and log indexes, and the leader's view of
the cluster (agents heard from, active keys, learning mode after a
failover), the epoch and the rules version. Each member is asked directly,
so a member that is down or partitioned shows as unreachable.`

// clusterStatus is what status prints: the cluster as the answering member
// sees it, and each member as it sees itself.
type clusterStatus struct {
	Region            string `json:"region"`
	AnsweredBy        string `json:"answered_by"`
	LeaderID          string `json:"leader_id"`
	LeaderGRPCAddress string `json:"leader_grpc_address"`
	Term              uint64 `json:"term"`
	Epoch             uint64 `json:"epoch"`
	Rules             uint32 `json:"rules"`
	RulesVersion      uint64 `json:"rules_version"`
	// Agents, ActiveKeys and Learning are the leader's: only it hears
	// reports. They are absent when the leader did not answer.
	Agents     *uint32 `json:"agents,omitempty"`
	ActiveKeys *uint64 `json:"active_keys,omitempty"`
	Learning   *bool   `json:"learning,omitempty"`
	// Tier is the cluster's part in the tier between regions, as its
	// leader sees it (docs/regions.md); absent without one.
	Tier *tierStatus `json:"tier,omitempty"`
	// Ledger is the export to a ledger sink, as the answering member
	// sees it; absent when the cluster has none.
	Ledger *ledgerExport `json:"ledger_export,omitempty"`
	// Shards is the cluster's place among its region's shard groups;
	// absent for a region never split.
	Shards  *shardPlace    `json:"shards,omitempty"`
	Members []memberStatus `json:"members"`
}

// shardPlace is a shard group as the answering member sees it.
type shardPlace struct {
	Group      string `json:"group"`
	Home       bool   `json:"home"`
	OwnedSlots uint32 `json:"owned_slots"`
	MapVersion uint64 `json:"map_version,omitempty"`
}

func shardPlaceOf(s *allotpb.ShardStatus) *shardPlace {
	if s == nil {
		return nil
	}
	return &shardPlace{Group: s.GetGroup(), Home: s.GetHome(), OwnedSlots: s.GetOwnedSlots(), MapVersion: s.GetMapVersion()}
}

// ledgerExport is how far the cluster has exported its ledger to the
// sink (docs/billing.md), and what the answering member still holds.
type ledgerExport struct {
	InMemory         uint64 `json:"lines_in_memory"`
	ExportedLines    uint64 `json:"exported_lines"`
	ExportedBatches  uint64 `json:"exported_batches"`
	ThroughWindow    string `json:"exported_through_window,omitempty"`
	ThroughKey       string `json:"exported_through_key,omitempty"`
	RetentionDropped uint64 `json:"retention_dropped_lines"`
	// Failing is the leader's export failing, absent while it succeeds
	// (or when the leader did not answer).
	Failing *exportFailing `json:"failing,omitempty"`
}

// exportFailing is a streak of failed export rounds on the leader.
type exportFailing struct {
	Error  string `json:"error"`
	Cause  string `json:"cause"`
	Since  string `json:"since"`
	Last   string `json:"last_failure"`
	Rounds uint64 `json:"rounds"`
}

// exportFailingOf is the failure l reports, or nil.
func exportFailingOf(l *allotpb.LedgerStatus) *exportFailing {
	if l.GetExportError() == "" {
		return nil
	}
	return &exportFailing{Error: l.GetExportError(), Cause: l.GetExportErrorCause(), Rounds: l.GetExportFailures(),
		Since: l.GetExportFailingSince().AsTime().UTC().Format(time.RFC3339), Last: l.GetExportLastFailure().AsTime().UTC().Format(time.RFC3339)}
}

func ledgerExportOf(l *allotpb.LedgerStatus) *ledgerExport {
	if !l.GetSink() && l.GetExportedLines() == 0 {
		return nil
	}
	out := &ledgerExport{InMemory: l.GetLines(), ExportedLines: l.GetExportedLines(), ExportedBatches: l.GetExportedBatches(), RetentionDropped: l.GetRetentionDropped()}
	if w := l.GetExportedThroughWindow(); w != nil {
		out.ThroughWindow = w.AsTime().UTC().Format(time.RFC3339)
		out.ThroughKey = l.GetExportedThroughTenant() + "/" + l.GetExportedThroughRule() + "/" + l.GetExportedThroughRegion()
	}
	return out
}

// tierStatus is a parent's regions, or a region's link to its parent.
type tierStatus struct {
	Role         string       `json:"role"`
	Parent       []string     `json:"parent,omitempty"`
	LastOK       string       `json:"last_ok,omitempty"`
	LastError    string       `json:"last_error,omitempty"`
	LeasedKeys   uint32       `json:"leased_keys"`
	FallbackKeys uint32       `json:"fallback_keys"`
	Regions      []tierRegion `json:"regions,omitempty"`
}

type tierRegion struct {
	Region   string `json:"region"`
	LastSeen string `json:"last_seen"`
}

func tierOf(t *allotpb.TierStatus) *tierStatus {
	if t == nil {
		return nil
	}
	ts := &tierStatus{Role: t.GetRole(), Parent: t.GetParent(), LastError: t.GetLastError(), LeasedKeys: t.GetLeasedKeys(), FallbackKeys: t.GetFallbackKeys()}
	if ns := t.GetLastOkUnixNano(); ns > 0 {
		ts.LastOK = time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
	}
	for _, r := range t.GetRegions() {
		ts.Regions = append(ts.Regions, tierRegion{Region: r.GetRegion(), LastSeen: time.Unix(0, r.GetLastSeenUnixNano()).UTC().Format(time.RFC3339Nano)})
	}
	return ts
}

type memberStatus struct {
	ID          string `json:"id"`
	GRPCAddress string `json:"grpc_address"`
	RaftAddress string `json:"raft_address"`
	HTTPAddress string `json:"http_address,omitempty"`
	Leader      bool   `json:"leader"`
	Voter       bool   `json:"voter"`
	// State, Term, AppliedIndex and CommitIndex are the member's own
	// answer; Error says why there is none.
	State        string `json:"state,omitempty"`
	Term         uint64 `json:"term,omitempty"`
	AppliedIndex uint64 `json:"applied_index,omitempty"`
	CommitIndex  uint64 `json:"commit_index,omitempty"`
	Error        string `json:"error,omitempty"`
}

func statusCommand() *Command {
	return &Command{
		Name: "status", Usage: "[--format table|json] [flags]",
		Short: "show the coordinator cluster",
		Long:  statusAbout, Flags: statusFlags,
	}
}

func statusFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var format string
	f.StringVar(&format, "format", "table", "output format: table or json")
	return func(ctx context.Context, e *env, args []string) error {
		if format != "table" && format != "json" {
			return usagef(cmd, "--format %q: want table or json", format)
		}
		cl, err := cf.connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		st, err := memberStatusOf(ctx, cf, cl)
		if err != nil {
			return err
		}
		cs := gatherStatus(ctx, cf, st)
		if format == "json" {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(cs)
		}
		return writeStatusTable(e.stdout, cs)
	}
}

// memberStatusOf asks the first member of cl that answers for its status.
func memberStatusOf(ctx context.Context, cf *clientFlags, cl *coordinatorClient) (*allotpb.StatusResponse, error) {
	var st *allotpb.StatusResponse
	err := cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
		var err error
		st, err = allotpb.NewClusterServiceClient(cc).Status(ctx, &allotpb.StatusRequest{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster status: %w", err)
	}
	return st, nil
}

// dialOne dials a single member with the same credentials as cf.
func (c *clientFlags) dialOne(addr string) (*coordinatorClient, error) {
	one := *c
	one.coordinators = addr
	return one.dial()
}

// gatherStatus asks every member st lists for its own status, in
// parallel, and combines the answers.
func gatherStatus(ctx context.Context, cf *clientFlags, st *allotpb.StatusResponse) *clusterStatus {
	cs := &clusterStatus{
		Region: st.GetRegion(), AnsweredBy: st.GetId(), LeaderID: st.GetLeaderId(), LeaderGRPCAddress: st.GetLeaderGrpcAddress(),
		Term: st.GetTerm(), Epoch: st.GetEpoch(), Rules: st.GetRules(), RulesVersion: st.GetRulesVersion(),
		Ledger:  ledgerExportOf(st.GetLedger()),
		Shards:  shardPlaceOf(st.GetShards()),
		Members: make([]memberStatus, len(st.GetMembers())),
	}
	// Raft lists members in the order they joined; by ID reads better.
	members := slices.SortedFunc(slices.Values(st.GetMembers()), func(a, b *allotpb.Member) int {
		return strings.Compare(a.GetId(), b.GetId())
	})
	own := make([]*allotpb.StatusResponse, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		cs.Members[i] = memberStatus{ID: m.GetId(), GRPCAddress: m.GetGrpcAddress(), RaftAddress: m.GetRaftAddress(),
			HTTPAddress: m.GetHttpAddress(), Leader: m.GetLeader(), Voter: m.GetVoter()}
		if m.GetId() == st.GetId() {
			own[i] = st // no need to ask again
			continue
		}
		if m.GetGrpcAddress() == "" {
			cs.Members[i].Error = "gRPC address not yet recorded"
			continue
		}
		wg.Go(func() {
			s, err := askMember(ctx, cf, m.GetGrpcAddress())
			if err != nil {
				cs.Members[i].Error = err.Error()
				return
			}
			own[i] = s
		})
	}
	wg.Wait()
	for i, s := range own {
		if s == nil {
			continue
		}
		m := &cs.Members[i]
		m.State, m.Term, m.AppliedIndex, m.CommitIndex = strings.ToLower(s.GetState()), s.GetTerm(), s.GetAppliedIndex(), s.GetCommitIndex()
		if s.GetId() == cs.LeaderID && s.GetState() == "Leader" {
			agents, keys, learning := s.GetAgents(), s.GetActiveKeys(), s.GetLearning()
			cs.Agents, cs.ActiveKeys, cs.Learning = &agents, &keys, &learning
			cs.Tier = tierOf(s.GetTier())
			if cs.Ledger != nil {
				cs.Ledger.Failing = exportFailingOf(s.GetLedger()) // only the leader exports
			}
		}
	}
	return cs
}

func askMember(ctx context.Context, cf *clientFlags, addr string) (*allotpb.StatusResponse, error) {
	cl, err := cf.dialOne(addr)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var st *allotpb.StatusResponse
	err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
		var err error
		st, err = allotpb.NewClusterServiceClient(cc).Status(ctx, &allotpb.StatusRequest{})
		return err
	})
	return st, err
}

func writeStatusTable(w io.Writer, cs *clusterStatus) error {
	leader := "none elected"
	if cs.LeaderID != "" {
		leader = cs.LeaderID
		if cs.LeaderGRPCAddress != "" {
			leader += " at " + cs.LeaderGRPCAddress
		}
	}
	fmt.Fprintf(w, "region %s: leader %s, term %d, epoch %d (as %s sees it)\n", cs.Region, leader, cs.Term, cs.Epoch, cs.AnsweredBy)
	fmt.Fprintf(w, "rules: %d at version %d\n", cs.Rules, cs.RulesVersion)
	if cs.Agents != nil {
		learning := "no"
		if *cs.Learning {
			learning = "yes (a new leader learns demand for one lease period)"
		}
		fmt.Fprintf(w, "agents: %d, active keys: %d, learning: %s\n", *cs.Agents, *cs.ActiveKeys, learning)
	} else {
		fmt.Fprintln(w, "agents: unknown (only the leader knows, and it did not answer)")
	}
	if sh := cs.Shards; sh != nil {
		if sh.Home {
			fmt.Fprintf(w, "shard group: %s, the home group (shard map version %d), owning %d of %d slots; see allot shards status\n", sh.Group, sh.MapVersion, sh.OwnedSlots, shard.Slots)
		} else {
			fmt.Fprintf(w, "shard group: %s, owning %d of %d slots; the map and the rules are the home group's\n", sh.Group, sh.OwnedSlots, shard.Slots)
		}
	}
	if l := cs.Ledger; l != nil {
		through := "nothing yet"
		if l.ThroughWindow != "" {
			through = "through the window of " + l.ThroughWindow + " (" + l.ThroughKey + ")"
		}
		fmt.Fprintf(w, "ledger sink: %s exported in %s, %s; %s in memory", plural.Count(l.ExportedLines, "line"), plural.Count(l.ExportedBatches, "batch"), through, plural.Count(l.InMemory, "line"))
		if l.RetentionDropped > 0 {
			fmt.Fprintf(w, "; %d deleted by retention", l.RetentionDropped)
		}
		fmt.Fprintln(w)
		if f := l.Failing; f != nil {
			rounds := "1 round"
			if f.Rounds != 1 {
				rounds = strconv.FormatUint(f.Rounds, 10) + " rounds"
			}
			fmt.Fprintf(w, "ledger sink: EXPORT FAILING since %s (%s, the last at %s; the lines wait in memory and are retried): %s: %s\n",
				f.Since, rounds, f.Last, f.Cause, f.Error)
		}
	}
	if t := cs.Tier; t != nil {
		switch t.Role {
		case "parent":
			var rs []string
			for _, r := range t.Regions {
				rs = append(rs, r.Region+" (last report "+r.LastSeen+")")
			}
			fmt.Fprintf(w, "tier: parent of %s: %s\n", plural.Count(len(t.Regions), "region"), strings.Join(rs, ", "))
		default:
			state := "answered at " + t.LastOK
			if t.LastError != "" {
				state = "NOT ANSWERING: " + t.LastError
			} else if t.LastOK == "" {
				state = "not reached yet"
			}
			fmt.Fprintf(w, "tier: leases from parent %s, %s; keys leased: %d, on their static fraction: %d\n",
				strings.Join(t.Parent, ","), state, t.LeasedKeys, t.FallbackKeys)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tLEADER\tVOTER\tSTATE\tTERM\tAPPLIED\tCOMMIT\tGRPC\tRAFT\tHTTP")
	var notes []string
	for _, m := range cs.Members {
		mark, voter, state := "", "yes", m.State
		if m.Leader {
			mark = "*"
		}
		if !m.Voter {
			voter = "no"
		}
		term, applied, commit := "-", "-", "-"
		if m.Error != "" {
			// A member the cluster has no address for yet (it is joining)
			// is not known to be down.
			state = "unreachable"
			if m.GRPCAddress == "" {
				state = "unknown"
			}
			notes = append(notes, fmt.Sprintf("%s: %s", m.ID, m.Error))
		} else {
			term, applied, commit = strconv.FormatUint(m.Term, 10), strconv.FormatUint(m.AppliedIndex, 10), strconv.FormatUint(m.CommitIndex, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, mark, voter, state, term, applied, commit,
			dashIfEmpty(m.GRPCAddress), dashIfEmpty(m.RaftAddress), dashIfEmpty(m.HTTPAddress))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
	return nil
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
