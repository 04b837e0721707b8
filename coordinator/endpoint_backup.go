package coordinator

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const backupChunk = 256 << 10

// streamSink is a raft.SnapshotSink that writes to a stream.
type streamSink struct{ w io.Writer }

func (s streamSink) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s streamSink) ID() string                  { return "backup" }
func (s streamSink) Cancel() error               { return nil }
func (s streamSink) Close() error                { return nil }

// chunkWriter cuts what is written into BackupChunks.
type chunkWriter struct {
	stream grpc.ServerStreamingServer[allotpb.BackupChunk]
	index  uint64
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += backupChunk {
		end := min(off+backupChunk, len(p))
		if err := w.stream.Send(&allotpb.BackupChunk{Data: p[off:end], AppliedIndex: w.index}); err != nil {
			return off, err
		}
		w.index = 0 // only the first chunk carries it
	}
	return len(p), nil
}

// Backup streams this member's state in the snapshot format. Call it on
// the leader for the most recent state.
func (s *clusterServer) Backup(_ *allotpb.BackupRequest, stream grpc.ServerStreamingServer[allotpb.BackupChunk]) error {
	c := s.c
	index := c.raft.AppliedIndex()
	snap, err := c.fsm.Snapshot()
	if err != nil {
		return status.Errorf(codes.Internal, "snapshot: %v", err)
	}
	defer snap.Release()
	w := bufio.NewWriterSize(&chunkWriter{stream: stream, index: index}, backupChunk)
	if err := snap.Persist(streamSink{w}); err != nil {
		return status.Errorf(codes.Unavailable, "streaming the backup: %v", err)
	}
	if err := w.Flush(); err != nil {
		return status.Errorf(codes.Unavailable, "streaming the backup: %v", err)
	}
	c.metrics.adminRequests.WithLabelValues("Backup", "ok").Inc()
	return nil
}

// Restore replaces the cluster's whole state with a backup. It runs on the
// leader only and is meant for disaster recovery into a fresh cluster: the
// leader takes the backup's state and installs it on the followers.
func (s *clusterServer) Restore(stream grpc.ClientStreamingServer[allotpb.RestoreChunk, allotpb.RestoreResponse]) error {
	c := s.c
	if !c.leading.Load() {
		_, addr := c.Leader()
		return status.Errorf(codes.FailedPrecondition, "restore runs on the leader, which is at %q", addr)
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if err := c.restoreAllowed(first.GetForceClusterId()); err != nil {
		c.metrics.adminRequests.WithLabelValues("Restore", "refused").Inc()
		return err
	}
	f, err := os.CreateTemp(c.cfg.DataDir, "restore-*.snap")
	if err != nil {
		return status.Errorf(codes.Internal, "restore: %v", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	size := int64(0)
	for chunk := first; ; {
		n, err := f.Write(chunk.GetData())
		size += int64(n)
		if err != nil {
			return status.Errorf(codes.Internal, "restore: %v", err)
		}
		if chunk, err = stream.Recv(); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
	}
	// Check the backup decodes before handing it to Raft.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return status.Errorf(codes.Internal, "restore: %v", err)
	}
	restored, err := state.ReadSnapshot(f)
	if err != nil {
		c.metrics.adminRequests.WithLabelValues("Restore", "invalid").Inc()
		return status.Errorf(codes.InvalidArgument, "not a valid backup: %v", err)
	}
	// The cluster keeps its own identity: its members' identity files
	// name it, whichever cluster the backup came from.
	restored.SetClusterID(c.clusterID())
	out, err := os.CreateTemp(c.cfg.DataDir, "restore-*.snap")
	if err != nil {
		return status.Errorf(codes.Internal, "restore: %v", err)
	}
	defer os.Remove(out.Name())
	defer out.Close()
	if err := writeState(restored, out); err != nil {
		return status.Errorf(codes.Internal, "restore: %v", err)
	}
	if size, err = out.Seek(0, io.SeekCurrent); err != nil {
		return status.Errorf(codes.Internal, "restore: %v", err)
	}
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		return status.Errorf(codes.Internal, "restore: %v", err)
	}
	f = out
	var before uint64
	var members []*allotpb.Member
	c.fsm.Read(func(s *state.State) {
		before = s.Epoch()
		for _, m := range s.Members() {
			members = append(members, proto.Clone(m).(*allotpb.Member))
		}
	})
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: size}
	if err := c.raft.Restore(meta, f, time.Minute); err != nil {
		return status.Errorf(codes.Unavailable, "restore: %v", err)
	}
	if err := c.restoreMembers(stream.Context(), members); err != nil {
		return status.Errorf(codes.Unavailable, "restored, but recording this cluster's members failed: %v", err)
	}
	// A new epoch above any this cluster issued, so agents take the new
	// leases; and the allocator forgets what described the old state.
	res, err := c.apply(stream.Context(), state.CmdEpoch, &fsmpb.EpochCommand{Leader: c.cfg.NodeID, AtLeast: before + 1}, 10*time.Second)
	if err != nil {
		return status.Errorf(codes.Unavailable, "restored, but starting a new epoch failed: %v", err)
	}
	// The backup's settings are the cluster's now; one written before
	// some were replicated leaves them for this leader to fix.
	if err := c.fixSettings(); err != nil {
		return status.Errorf(codes.Unavailable, "restored, but %v", err)
	}
	c.startTerm(res.(uint64), c.now())
	c.metrics.adminRequests.WithLabelValues("Restore", "ok").Inc()
	c.log.Warn("cluster state replaced from a backup", "bytes", size, "index", c.raft.AppliedIndex(), "epoch", res)
	return stream.SendAndClose(&allotpb.RestoreResponse{Index: c.raft.AppliedIndex()})
}

// restoreAllowed refuses a restore into a cluster that has state (rules,
// usage lines or agents' report sequences) unless force names it: a
// restore replaces all of it, and running it against the wrong address,
// or twice, must not be one keystroke away.
func (c *Coordinator) restoreAllowed(force string) error {
	var rules, lines, agents int
	c.fsm.Read(func(s *state.State) { rules, lines, agents = s.Rules().Len(), s.LedgerLen(), s.IncarnationLen() })
	cid := c.clusterID()
	if rules == 0 && lines == 0 && agents == 0 {
		return nil
	}
	if force != "" && force == cid {
		c.log.Warn("restoring over a cluster with state, as forced", "cluster", cid, "rules", rules, "ledger_lines", lines, "agent_runs", agents)
		return nil
	}
	msg := fmt.Sprintf("cluster %s (region %s) has state: %s, %s, %s; a restore replaces all of it; to go ahead, pass --force %s",
		cid, c.cfg.Region, count(rules, "rule"), count(lines, "ledger line"), count(agents, "agent run"), cid)
	if force != "" {
		msg = fmt.Sprintf("--force %s does not name this cluster; %s", force, msg)
	}
	return status.Error(codes.FailedPrecondition, msg)
}

// writeState writes a state in the snapshot format.
func writeState(st *state.State, w io.Writer) error {
	return st.Snapshot().Write(w)
}

// restoreMembers puts back this cluster's member records after a restore.
// A backup carries the members of the cluster it was taken from, but the
// members are those in this cluster's Raft configuration: left as
// restored, the leader's address would be unknown (followers could not
// forward to it) and agents would be sent the old cluster's addresses.
// known is what this cluster recorded before the restore.
func (c *Coordinator) restoreMembers(ctx context.Context, known []*allotpb.Member) error {
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	inConfig := map[string]bool{}
	for _, srv := range f.Configuration().Servers {
		inConfig[string(srv.ID)] = true
	}
	var stale []string
	c.fsm.Read(func(s *state.State) {
		for _, m := range s.Members() {
			if id := m.GetId(); !inConfig[id] {
				stale = append(stale, id)
			}
		}
	})
	for _, id := range stale {
		if _, err := c.apply(ctx, state.CmdMember, &fsmpb.MemberCommand{Member: &allotpb.Member{Id: id}, Remove: true}, 10*time.Second); err != nil {
			return err
		}
	}
	for _, m := range append(known, c.selfMember()) { // this member's own addresses last: they are current
		if !inConfig[m.GetId()] {
			continue
		}
		if _, err := c.apply(ctx, state.CmdMember, &fsmpb.MemberCommand{Member: m}, 10*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// BackupTo writes a backup of the member at addr to w; for operator tools
// and tests.
func BackupTo(ctx context.Context, client allotpb.ClusterServiceClient, w io.Writer) (uint64, error) {
	stream, err := client.Backup(ctx, &allotpb.BackupRequest{})
	if err != nil {
		return 0, err
	}
	var index uint64
	for {
		chunk, err := stream.Recv()
		if err == io.EOF {
			return index, nil
		}
		if err != nil {
			return index, fmt.Errorf("coordinator: backup: %w", err)
		}
		if chunk.GetAppliedIndex() != 0 {
			index = chunk.GetAppliedIndex()
		}
		if _, err := w.Write(chunk.GetData()); err != nil {
			return index, fmt.Errorf("coordinator: backup: %w", err)
		}
	}
}

// RestoreFrom sends a backup read from r to the leader behind client.
// force must name the cluster's ID when the cluster has state.
func RestoreFrom(ctx context.Context, client allotpb.ClusterServiceClient, r io.Reader, force string) (uint64, error) {
	stream, err := client.Restore(ctx)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, backupChunk)
	for first := true; ; first = false {
		n, err := io.ReadFull(r, buf)
		if n > 0 || first {
			chunk := &allotpb.RestoreChunk{Data: append([]byte(nil), buf[:n]...)}
			if first {
				chunk.ForceClusterId = force
			}
			if serr := stream.Send(chunk); serr != nil {
				break // the server's reason comes from CloseAndRecv
			}
		}
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("coordinator: restore: reading backup: %w", err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return 0, err
	}
	return resp.GetIndex(), nil
}

// count is n and the noun, "s" added unless n is 1: "1 rule", "0 rules".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
