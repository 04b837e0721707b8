package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/coordinator/datadir"
	"github.com/allot-io/allot/internal/plural"
)

const clusterRecoverAbout = `
Recovers from a lost quorum: when a majority of the members is gone for
good (2 of 3, 3 of 5), the survivors cannot elect a leader. Stop the
surviving member with the most recent log (the highest APPLIED in the last
'allot status' you have), then run this on its data dir: it becomes a
cluster of one with its log and ledger intact, and the lost members are
dropped from its configuration. Start it again with its usual flags; it
leads alone. Then add members back with fresh data dirs and --join
(docs/operations.md#runbook-a-lost-quorum).

Usage the lost members had committed but this member never received is
not in its ledger. The command works offline, on a stopped member: a
running one holds its Raft store, and is refused.`

func clusterRecoverFlags(f *flags) runFunc {
	cmd := f.cmd
	var rc coordinator.RecoverConfig
	var lf logFlags
	f.StringVar(&rc.DataDir, "data-dir", "", "the stopped member's data directory (required)")
	f.StringVar(&rc.NodeID, "node-id", "", "the member's node ID (required)")
	f.StringVar(&rc.RaftAddr, "raft-addr", "", "the Raft address it will listen on (default: the one its configuration records)")
	lf.register(f)
	return func(_ context.Context, e *env, args []string) error {
		if rc.DataDir == "" || rc.NodeID == "" {
			return usagef(cmd, "--data-dir and --node-id are required")
		}
		logger, err := lf.logger("cluster recover", "allot", e.stderr)
		if err != nil {
			return err
		}
		rc.Logger = logger
		res, err := coordinator.Recover(rc)
		var de *datadir.Error
		if errors.As(err, &de) || errors.Is(err, coordinator.ErrNothingToRecover) {
			return &usageError{err: err}
		}
		if err != nil {
			return err
		}
		dropped := "none"
		if len(res.Dropped) > 0 {
			dropped = strings.Join(res.Dropped, ", ")
		}
		fmt.Fprintf(e.stdout, "recovered %s of cluster %s: a one-member cluster at raft %s, its log to index %d (%s, %s, %s); dropped %s\n",
			rc.NodeID, res.ClusterID, res.RaftAddr, res.LastIndex, plural.Count(res.LedgerLines, "ledger line"), plural.Count(res.Rules, "rule"), plural.Count(res.Agents, "agent run"), dropped)
		fmt.Fprintf(e.stdout, "start it with its usual flags, then add members with fresh data dirs and --join (docs/operations.md#adding-a-member)\n")
		return nil
	}
}

const clusterInspectAbout = `
Reads a stopped member's data dir without changing it: its state, its
log's span and last term, the configuration it last knew and, with
--after N, the usage carried by its report entries after index N. Before
'allot cluster recover', inspect every member whose disk still reads: the
survivor to recover is the one with the highest last term and index, and
--after that index on the others sums what the recovered cluster will
lack (an upper bound: some of it may be retries the survivor has).`

func clusterInspectFlags(f *flags) runFunc {
	cmd := f.cmd
	var dir, node, format string
	var after uint64
	f.StringVar(&dir, "data-dir", "", "the stopped member's data directory (required)")
	f.StringVar(&node, "node-id", "", "the member's node ID (required)")
	f.Uint64Var(&after, "after", 0, "sum the usage in report entries after this index (0: none)")
	f.StringVar(&format, "format", "text", "text or json")
	return func(_ context.Context, e *env, args []string) error {
		if dir == "" || node == "" {
			return usagef(cmd, "--data-dir and --node-id are required")
		}
		if format != "text" && format != "json" {
			return usagef(cmd, "--format is text or json, not %q", format)
		}
		in, err := coordinator.Inspect(dir, node, after)
		var de *datadir.Error
		if errors.As(err, &de) {
			return &usageError{err: err}
		}
		if err != nil {
			return err
		}
		if after == 0 {
			in.Usage = nil
		}
		if format == "json" {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(in)
		}
		fmt.Fprintf(e.stdout, "%s of cluster %s (%s): log %d to %d, last term %d, current term %d, snapshot at %d\n",
			in.NodeID, orNone(in.ClusterID), in.State, in.FirstIndex, in.LastIndex, in.LastTerm, in.CurrentTerm, in.SnapshotIndex)
		var ms []string
		for _, m := range in.Members {
			role := "voter"
			if !m.GetVoter() {
				role = "nonvoter"
			}
			ms = append(ms, fmt.Sprintf("%s (%s, raft %s)", m.GetId(), role, m.GetRaftAddress()))
		}
		fmt.Fprintf(e.stdout, "members: %s\n", strings.Join(ms, ", "))
		if after > 0 {
			var adm, den uint64
			for _, u := range in.Usage {
				adm, den = adm+u.GetAdmitted(), den+u.GetDenied()
			}
			fmt.Fprintf(e.stdout, "after index %d: %d report entries carrying %d admitted and %d denied units\n", after, in.Entries, adm, den)
			for _, u := range in.Usage {
				fmt.Fprintf(e.stdout, "  %s\t%s\tadmitted %d\tdenied %d\n", u.GetTenant(), u.GetRule(), u.GetAdmitted(), u.GetDenied())
			}
		}
		return nil
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none yet)"
	}
	return s
}
