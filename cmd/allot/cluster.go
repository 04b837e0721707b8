package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/allot-io/allot/coordinator"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
)

func clusterCommand() *Command {
	return &Command{
		Name:  "cluster",
		Short: "remove members, back up and restore the cluster",
		Long:  "Administers the coordinator cluster.",
		Notes: `
remove, backup and restore need the admin token when the cluster has one:
a token file (--token-file, ALLOT_TOKEN_FILE) or ALLOT_ADMIN_TOKEN.`,
		Commands: []*Command{
			{
				Name: "remove", Args: "ID",
				Short: "take member ID out of the cluster for good",
				Long:  clusterRemoveAbout, Flags: clusterRemoveFlags,
			},
			{
				Name: "backup", Args: "FILE",
				Short: "write the leader's whole state (rules, ledger, members) to FILE",
				Long:  clusterBackupAbout, Flags: clusterBackupFlags,
			},
			{
				Name: "restore", Args: "FILE", Usage: "FILE [--force CLUSTER-ID] [flags]",
				Short: "replace the whole cluster's state with a backup",
				Long:  clusterRestoreAbout, Flags: clusterRestoreFlags,
			},
			{
				Name: "recover", Usage: "--data-dir DIR --node-id ID [--raft-addr HOST:PORT]",
				Short: "offline: make a surviving member a one-member cluster when a quorum is lost for good",
				Long:  clusterRecoverAbout, Flags: clusterRecoverFlags,
			},
			{
				Name: "inspect", Usage: "--data-dir DIR --node-id ID [--after N] [--format text|json]",
				Short: "offline: what a stopped member's data dir holds",
				Long:  clusterInspectAbout, Flags: clusterInspectFlags,
			},
		},
	}
}

const clusterRemoveAbout = `
Removes member ID from the Raft configuration and forgets its addresses.
Keep an odd number of voters. The member's data directory is left as it
is; a removed member must not be restarted with it.`

func clusterRemoveFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	return func(ctx context.Context, e *env, args []string) error {
		id, err := exactlyOne(cmd, "member ID", args)
		if err != nil {
			return err
		}
		// Raft removes an unknown ID without complaint, so a typo would look
		// like success: check against the leader's view of the members.
		cl, st, err := leaderClient(ctx, cf)
		if err != nil {
			return err
		}
		defer cl.Close()
		if !hasMember(st.GetMembers(), id) {
			return fmt.Errorf("not found: no member %q; the members are %s", id, memberList(st.GetMembers()))
		}
		var resp *allotpb.RemoveResponse
		err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
			var err error
			resp, err = allotpb.NewClusterServiceClient(cc).Remove(ctx, &allotpb.RemoveRequest{Id: id})
			return err
		})
		if err != nil {
			return fmt.Errorf("removing %s: %w", id, err)
		}
		fmt.Fprintf(e.stdout, "removed %s; the members are now %s\n", id, memberList(resp.GetMembers()))
		return nil
	}
}

func hasMember(ms []*allotpb.Member, id string) bool {
	for _, m := range ms {
		if m.GetId() == id {
			return true
		}
	}
	return false
}

// memberList names members, the leader marked: "c1 (leader), c2, c3".
func memberList(ms []*allotpb.Member) string {
	if len(ms) == 0 {
		return "none"
	}
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.GetId()
		if m.GetLeader() {
			names[i] += " (leader)"
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// leaderClient finds the leader through any member and dials it alone,
// returning the leader's own status. Changes go there: followers answer
// reads from replicas that may lag, backups are freshest on the leader,
// and only the leader restores.
func leaderClient(ctx context.Context, cf *clientFlags) (*coordinatorClient, *allotpb.StatusResponse, error) {
	cl, err := cf.connect()
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	st, err := memberStatusOf(ctx, cf, cl)
	if err != nil {
		return nil, nil, err
	}
	if st.GetLeaderGrpcAddress() == "" {
		return nil, nil, errors.New("no leader elected yet; retry shortly")
	}
	leader, err := cf.dialOne(st.GetLeaderGrpcAddress())
	if err != nil {
		return nil, nil, fmt.Errorf("leader %s: %w", st.GetLeaderId(), err)
	}
	own, err := memberStatusOf(ctx, cf, leader)
	if err != nil {
		leader.Close()
		return nil, nil, fmt.Errorf("leader %s at %s: %w", st.GetLeaderId(), st.GetLeaderGrpcAddress(), err)
	}
	return leader, own, nil
}

const clusterBackupAbout = `
Streams the leader's whole state — rules, usage ledger, agent
incarnations, members — in the snapshot format to FILE, which is written
whole or not at all (through a temporary file in the same directory) and
readable by its owner only: it holds every tenant's usage.`

func clusterBackupFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var out string
	f.StringVar(&out, "out", "", "the file to write, instead of the FILE argument")
	return func(ctx context.Context, e *env, args []string) error {
		if out != "" {
			args = append(args, out)
		}
		if len(args) != 1 {
			return usagef(cmd, "want one backup file, got %d", len(args))
		}
		path := args[0]
		leader, st, err := leaderClient(ctx, cf)
		if err != nil {
			return err
		}
		defer leader.Close()
		var index uint64
		size, err := writeFileAtomic(path, func(w io.Writer) error {
			return cf.once(ctx, leader, func(ctx context.Context, cc *grpc.ClientConn) error {
				var err error
				index, err = coordinator.BackupTo(ctx, allotpb.NewClusterServiceClient(cc), w)
				return err
			})
		})
		if err != nil {
			return fmt.Errorf("backing up %s: %w", st.GetId(), err)
		}
		fmt.Fprintf(e.stdout, "backed up %s at index %d: %d bytes to %s\n", st.GetId(), index, size, path)
		return nil
	}
}

// writeFileAtomic writes path through a temporary file in the same
// directory, renamed over path only once fully written and synced, so
// that a failed backup never leaves a truncated file that looks whole.
func writeFileAtomic(path string, write func(io.Writer) error) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, err
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	cw := &countingWriter{w: bw}
	if err := write(cw); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	if err := tmp.Sync(); err != nil {
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, err
	}
	committed = true
	return cw.n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

const clusterRestoreAbout = `
Replaces the cluster's rules, usage ledger and agents' report sequences
with a backup made by 'allot cluster backup'. It is meant for disaster
recovery into a fresh cluster. The cluster keeps its own members and its
own cluster ID (the backup's members, those of the cluster it came from,
are dropped). The leader checks the backup before taking it, installs it
on the followers and starts a new epoch so that agents take its leases.

A cluster that already has rules, usage or agents is refused unless
--force names its cluster ID (the refusal, and 'allot status', give it):
whatever it held is lost.`

func clusterRestoreFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var force string
	f.StringVar(&force, "force", "", "the ID of the cluster to overwrite, required when it has state (rules, usage or agents)")
	return func(ctx context.Context, e *env, args []string) error {
		path, err := exactlyOne(cmd, "backup file", args)
		if err != nil {
			return err
		}
		file, err := os.Open(path)
		if err != nil {
			return &usageError{err: err}
		}
		defer file.Close()
		info, err := file.Stat()
		if err != nil {
			return &usageError{err: err}
		}
		if info.Size() == 0 {
			return usagef(cmd, "%s is empty", path)
		}
		leader, st, err := leaderClient(ctx, cf)
		if err != nil {
			return err
		}
		defer leader.Close()
		var index uint64
		// One leader, one attempt: the file is read as it is sent, so a
		// second member could not be offered it again.
		err = cf.once(ctx, leader, func(ctx context.Context, cc *grpc.ClientConn) error {
			var err error
			index, err = coordinator.RestoreFrom(ctx, allotpb.NewClusterServiceClient(cc), bufio.NewReaderSize(file, 1<<20), force)
			return err
		})
		if errors.Is(err, errRejected) {
			return &usageError{err: fmt.Errorf("%s: %w", path, err)} // not a backup: bad input
		}
		if err != nil {
			return fmt.Errorf("restoring %s on %s: %w", path, st.GetId(), err)
		}
		fmt.Fprintf(e.stdout, "restored %s (%d bytes) through leader %s: the cluster's state is at index %d\n", path, info.Size(), st.GetId(), index)
		return nil
	}
}
