package datadir

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// countFSM is a state machine that keeps the entries applied, so that a
// test can tell a restored state from a lost one.
type countFSM struct {
	mu      sync.Mutex
	entries []string
}

func (f *countFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, string(l.Data))
	return nil
}

func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return countSnap(append([]string(nil), f.entries...)), nil
}

func (f *countFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = nil
	for i := 0; i < len(b); {
		n := int(b[i])
		f.entries = append(f.entries, string(b[i+1:i+1+n]))
		i += 1 + n
	}
	return nil
}

type countSnap []string

func (s countSnap) Persist(sink raft.SnapshotSink) error {
	for _, e := range s {
		if _, err := sink.Write(append([]byte{byte(len(e))}, e...)); err != nil {
			sink.Cancel()
			return err
		}
	}
	return sink.Close()
}

func (countSnap) Release() {}

// storeLayout is how a test's Raft store is filled: entries applied,
// with a snapshot after each of snapshotsAt (entry counts), and how many
// entries a snapshot leaves in the log.
type storeLayout struct {
	entries     int
	snapshotsAt []int
	trailing    uint64
	payload     int // bytes per entry
	// restoreAt, when set, restores a user snapshot (as allot cluster
	// restore does) after that many entries: Raft then leaves the
	// snapshot's index without a log entry.
	restoreAt int
}

// makeStore runs a one-member Raft cluster on dir with a real raft-boltdb
// store and file snapshots, applies the layout, and shuts it down
// cleanly, leaving the directory as a member's would be.
func makeStore(t testing.TB, dir string, lay storeLayout) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	store, err := raftboltdb.NewBoltStore(filepath.Join(dir, raftDB))
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 3, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("n1")
	cfg := raft.DefaultConfig()
	cfg.LocalID = "n1"
	cfg.Logger = hclog.NewNullLogger()
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.SnapshotThreshold, cfg.SnapshotInterval = 1<<40, time.Hour
	cfg.TrailingLogs = lay.trailing
	r, err := raft.NewRaft(cfg, &countFSM{}, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: trans.LocalAddr()}}}).Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	pad := make([]byte, lay.payload)
	next := 0
	for i := 1; i <= lay.entries; i++ {
		if err := r.Apply(append([]byte(fmt.Sprintf("e%d ", i)), pad...), time.Second).Error(); err != nil {
			t.Fatal(err)
		}
		if i == lay.restoreAt {
			var b bytes.Buffer
			for _, e := range []string{"restored"} {
				b.WriteByte(byte(len(e)))
				b.WriteString(e)
			}
			if err := r.Restore(&raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(b.Len())}, &b, 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		if next < len(lay.snapshotsAt) && i == lay.snapshotsAt[next] {
			if err := r.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
			next++
		}
	}
	if err := r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
}

// copyDir copies a data directory, so each case corrupts its own.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode())
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// snapshotDirs lists a data directory's snapshots, newest first (their
// names sort by term, index, then time).
func snapshotDirs(t *testing.T, dir string) []string {
	t.Helper()
	list, _, err := checkSnapshots(dir, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list {
		out = append(out, s.dir)
	}
	return out
}
