package datadir

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// goodStore is a data directory with 300 entries, snapshots after 100
// and 200, and the whole log kept: the template every case copies.
func goodStore(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	makeStore(t, dir, storeLayout{entries: 300, snapshotsAt: []int{100, 200}, trailing: 10_000, payload: 200})
	return dir
}

func mustOpen(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, NodeID: "n1"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// wantError opens dir and requires an *Error of kind, naming path, whose
// message says want, and leaves every file as it was.
func wantError(t *testing.T, dir string, kind error, path, want string) {
	t.Helper()
	before := tree(t, dir)
	_, err := Open(Options{Dir: dir, NodeID: "n1"})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, kind) {
		t.Fatalf("Open = %v, want an *Error wrapping %v", err, kind)
	}
	if e.Path != path || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "docs/operations.md#runbook-") {
		t.Fatalf("error %q: want path %s, %q and a runbook link", err, path, want)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %q is more than one line", err)
	}
	if after := tree(t, dir); !equalTrees(before, after) {
		t.Fatalf("Open changed the directory")
	}
}

// tree reads every file under dir.
func tree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			out[path], _ = os.ReadFile(path)
		}
		return nil
	})
	return out
}

func equalTrees(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestOpenStates(t *testing.T) {
	good := goodStore(t)
	t.Run("existing", func(t *testing.T) {
		s := mustOpen(t, copyDir(t, good))
		if s.State != Existing || s.LastIndex < 300 || s.SnapshotIndex == 0 || len(s.Warnings) != 0 {
			t.Fatalf("state %v, last %d, snapshot %d, warnings %v", s.State, s.LastIndex, s.SnapshotIndex, s.Warnings)
		}
	})
	t.Run("missing dir is fresh", func(t *testing.T) {
		s := mustOpen(t, filepath.Join(t.TempDir(), "new"))
		if s.State != Fresh {
			t.Fatalf("state %v", s.State)
		}
	})
	t.Run("empty raft.db without identity is fresh", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, raftDB), nil, 0o600)
		if s := mustOpen(t, dir); s.State != Fresh {
			t.Fatalf("state %v", s.State)
		}
	})
	t.Run("identity without state is lost", func(t *testing.T) {
		dir := t.TempDir()
		if err := WriteIdentity(dir, Identity{ClusterID: "k1", NodeID: "n1", Written: time.Now()}); err != nil {
			t.Fatal(err)
		}
		s := mustOpen(t, dir)
		if s.State != Lost || s.Identity.ClusterID != "k1" {
			t.Fatalf("state %v, identity %+v", s.State, s.Identity)
		}
	})
}

func TestOpenRefuses(t *testing.T) {
	good := goodStore(t)
	db := func(dir string) string { return filepath.Join(dir, raftDB) }
	pageSize := int64(os.Getpagesize())
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string) (path string)
		kind   error
		want   string
	}{
		{"truncated to half", func(t *testing.T, dir string) string {
			st, _ := os.Stat(db(dir))
			os.Truncate(db(dir), st.Size()/2)
			return db(dir)
		}, ErrCorrupt, "truncated"},
		{"truncated to one page", func(t *testing.T, dir string) string {
			os.Truncate(db(dir), pageSize)
			return db(dir)
		}, ErrCorrupt, "truncated"},
		{"truncated to a few bytes", func(t *testing.T, dir string) string {
			os.Truncate(db(dir), 40)
			return db(dir)
		}, ErrCorrupt, "too short"},
		{"both meta pages overwritten", func(t *testing.T, dir string) string {
			overwrite(t, db(dir), 0, 2*pageSize, 1)
			return db(dir)
		}, ErrCorrupt, "neither meta page is valid"},
		{"freelist page overwritten", func(t *testing.T, dir string) string {
			m := metaOf(t, db(dir))
			overwrite(t, db(dir), int64(m.freelist)*int64(m.pageSize), int64(m.pageSize), 2)
			return db(dir)
		}, ErrCorrupt, "freelist"},
		{"identity of another node", func(t *testing.T, dir string) string {
			WriteIdentity(dir, Identity{ClusterID: "k1", NodeID: "n2"})
			return filepath.Join(dir, identityFile)
		}, ErrIdentity, `not "n1"`},
		{"identity unreadable", func(t *testing.T, dir string) string {
			os.WriteFile(filepath.Join(dir, identityFile), []byte("{"), 0o600)
			return filepath.Join(dir, identityFile)
		}, ErrIdentity, "not a valid identity file"},
		{"raft.db gone, snapshots left", func(t *testing.T, dir string) string {
			os.Remove(db(dir))
			return db(dir)
		}, ErrLostLog, "forgotten term"},
		{"every snapshot damaged", func(t *testing.T, dir string) string {
			for _, s := range snapshotDirs(t, dir) {
				flipByte(t, filepath.Join(s, snapshotState))
			}
			return filepath.Join(dir, snapshotsDir)
		}, ErrCorrupt, "no intact snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, good)
			path := tc.damage(t, dir)
			wantError(t, dir, tc.kind, path, tc.want)
		})
	}
}

// TestOpenEveryPageDamaged overwrites each page of a real store in turn
// with random bytes: Open either refuses with ErrCorrupt or, when the page
// held nothing reachable, opens a store whose whole log reads. It never
// panics or faults.
func TestOpenEveryPageDamaged(t *testing.T) {
	good := filepath.Join(t.TempDir(), "data")
	makeStore(t, good, storeLayout{entries: 120, snapshotsAt: []int{100}, trailing: 10_000, payload: 300})
	st, err := os.Stat(filepath.Join(good, raftDB))
	if err != nil {
		t.Fatal(err)
	}
	m := metaOf(t, filepath.Join(good, raftDB))
	pages := st.Size() / int64(m.pageSize)
	refused := 0
	for p := int64(0); p < pages; p++ {
		dir := copyDir(t, good)
		overwrite(t, filepath.Join(dir, raftDB), p*int64(m.pageSize), int64(m.pageSize), uint64(p))
		s, err := Open(Options{Dir: dir, NodeID: "n1"})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("page %d: %v, want ErrCorrupt", p, err)
			}
			refused++
			continue
		}
		var l raft.Log
		for i := s.FirstIndex; i <= s.LastIndex; i++ {
			if err := s.Log.GetLog(i, &l); err != nil {
				t.Fatalf("page %d: opened, but entry %d does not read: %v", p, i, err)
			}
		}
		s.Close()
	}
	if refused == 0 {
		t.Fatalf("no page's damage was refused among %d pages", pages)
	}
	t.Logf("%d of %d pages refused when damaged; the rest held nothing reachable", refused, pages)
}

func TestOpenFallsBackToAnOlderSnapshot(t *testing.T) {
	good := goodStore(t)
	dir := copyDir(t, good)
	newest := snapshotDirs(t, dir)[0]
	flipByte(t, filepath.Join(newest, snapshotState))
	s := mustOpen(t, dir)
	if s.SnapshotIndex == 0 || len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "falling back") || !strings.Contains(s.Warnings[0], "CRC") {
		t.Fatalf("snapshot %d, warnings %q", s.SnapshotIndex, s.Warnings)
	}
	// Raft itself falls back the same way and replays the log.
	s.Close()
	fsm := restoreWithRaft(t, dir)
	if len(fsm.entries) != 300 {
		t.Fatalf("restored %d entries, want 300", len(fsm.entries))
	}
}

func TestOpenRefusesAFallbackWithAGap(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	// Snapshots keep only 10 entries of log: the older snapshot cannot
	// be replayed forward once the newer is gone.
	makeStore(t, dir, storeLayout{entries: 300, snapshotsAt: []int{100, 250}, trailing: 10, payload: 50})
	flipByte(t, filepath.Join(snapshotDirs(t, dir)[0], snapshotState))
	wantError(t, dir, ErrCorrupt, filepath.Join(dir, snapshotsDir), "cannot be fallen back on")
}

// TestOpenAfterAUserRestore: Raft leaves the index of a restored snapshot
// without a log entry; that is no gap.
func TestOpenAfterAUserRestore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	makeStore(t, dir, storeLayout{entries: 40, restoreAt: 20, trailing: 10_000, payload: 10})
	s := mustOpen(t, dir)
	if s.State != Existing || s.SnapshotIndex == 0 || s.LastIndex <= s.SnapshotIndex {
		t.Fatalf("state %v, snapshot %d, last %d", s.State, s.SnapshotIndex, s.LastIndex)
	}
	s.Close()
	if fsm := restoreWithRaft(t, dir); len(fsm.entries) != 21 || fsm.entries[0] != "restored" {
		t.Fatalf("restored %d entries: %q", len(fsm.entries), fsm.entries[:min(3, len(fsm.entries))])
	}
}

func TestOpenInUse(t *testing.T) {
	dir := copyDir(t, goodStore(t))
	s := mustOpen(t, dir)
	_, err := Open(Options{Dir: dir, NodeID: "n1", LockWait: 100 * time.Millisecond})
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "another allot coordinator") {
		t.Fatalf("second Open = %v, want ErrInUse", err)
	}
	s.Close()
}

func TestOpenBadLogEntry(t *testing.T) {
	dir := copyDir(t, goodStore(t))
	_, err := Open(Options{Dir: dir, NodeID: "n1", CheckEntry: func(l *raft.Log) error {
		if strings.HasPrefix(string(l.Data), "e250 ") {
			return errors.New("does not decode")
		}
		return nil
	}})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "does not decode") || !strings.Contains(err.Error(), "log entry") {
		t.Fatalf("Open = %v", err)
	}
}

// restoreWithRaft starts Raft on dir as a member would and returns its
// state machine once the log is applied.
func restoreWithRaft(t *testing.T, dir string) *countFSM {
	t.Helper()
	s := mustOpen(t, dir)
	_, trans := raft.NewInmemTransport("n1")
	cfg := raft.DefaultConfig()
	cfg.LocalID = "n1"
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	cfg.Logger = nil
	fsm := &countFSM{}
	r, err := raft.NewRaft(cfg, fsm, s.Log, s.Log, s.Snapshots, trans)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	deadline := time.Now().Add(10 * time.Second)
	for r.State() != raft.Leader || r.AppliedIndex() < s.LastIndex {
		if time.Now().After(deadline) {
			t.Fatalf("applied %d of %d", r.AppliedIndex(), s.LastIndex)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	return fsm
}

func metaOf(t *testing.T, path string) boltMeta {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	m, _, problem := checkBoltLayout(f, st.Size())
	if problem != "" {
		t.Fatal(problem)
	}
	return m
}

// overwrite writes n random bytes at off.
func overwrite(t *testing.T, path string, off, n int64, seed uint64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 42))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		t.Fatalf("reading %s: %v", path, err)
	}
	b[len(b)/2] ^= 0xFF
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// FuzzOpenDamaged writes arbitrary bytes anywhere in a real store: Open
// refuses it with ErrCorrupt, or opens a store whose whole log reads, and
// never panics or faults.
func FuzzOpenDamaged(f *testing.F) {
	good := filepath.Join(f.TempDir(), "data")
	makeStore(f, good, storeLayout{entries: 60, snapshotsAt: []int{50}, trailing: 10_000, payload: 100})
	f.Add(uint32(0), []byte{0xff})
	f.Add(uint32(4096+20), []byte("garbage"))
	f.Add(uint32(3*4096+8), []byte{0x10, 0, 0xff, 0xff})
	f.Add(uint32(5*4096+100), bytes.Repeat([]byte{0xaa}, 300))
	f.Fuzz(func(t *testing.T, off uint32, data []byte) {
		dir := copyDir(t, good)
		path := filepath.Join(dir, raftDB)
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) == 0 {
			return
		}
		at := int64(off) % st.Size()
		fh, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = fh.WriteAt(data, at)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(Options{Dir: dir, NodeID: "n1"})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
			return
		}
		defer s.Close()
		var l raft.Log
		for i := s.FirstIndex; i <= s.LastIndex; i++ {
			if err := s.Log.GetLog(i, &l); err != nil {
				t.Fatalf("opened, but entry %d does not read: %v", i, err)
			}
		}
	})
}
