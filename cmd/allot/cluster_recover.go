package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/coordinator/datadir"
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

func runClusterRecover(_ context.Context, e *env) error {
	const cmd = "cluster recover"
	f := newFlags(e, cmd, "--data-dir DIR --node-id ID [--raft-addr HOST:PORT]", clusterRecoverAbout)
	var rc coordinator.RecoverConfig
	var lf logFlags
	f.StringVar(&rc.DataDir, "data-dir", "", "the stopped member's data directory (required)")
	f.StringVar(&rc.NodeID, "node-id", "", "the member's node ID (required)")
	f.StringVar(&rc.RaftAddr, "raft-addr", "", "the Raft address it will listen on (default: the one its configuration records)")
	lf.register(f)
	if _, err := parseArgs(f, e); err != nil {
		return err
	}
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
	fmt.Fprintf(e.stdout, "recovered %s of cluster %s: a one-member cluster at raft %s, its log to index %d (%d ledger lines, %d rules, %d agent runs); dropped %s\n",
		rc.NodeID, res.ClusterID, res.RaftAddr, res.LastIndex, res.LedgerLines, res.Rules, res.Agents, dropped)
	fmt.Fprintf(e.stdout, "start it with its usual flags, then add members with fresh data dirs and --join (docs/operations.md#adding-a-member)\n")
	return nil
}
