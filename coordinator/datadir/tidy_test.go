package datadir

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

// unfinishedDirs are the .tmp directories in dir's snapshot store.
func unfinishedDirs(t *testing.T, dir string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(dir, snapshotsDir, "*"+snapshotTmp))
	if err != nil {
		t.Fatal(err)
	}
	return matches
}

// TestOpenRemovesUnfinishedSnapshots: what a crash or a full disk left of
// snapshots Raft was writing is removed when the member starts, and said;
// the finished snapshots and the log are kept, and inspect (read-only)
// removes nothing.
func TestOpenRemovesUnfinishedSnapshots(t *testing.T) {
	dir := goodStore(t)
	before := snapshotDirs(t, dir)
	for _, name := range []string{"3-250-1796165943583.tmp", "3-260-1796165945440.tmp"} {
		p := filepath.Join(dir, snapshotsDir, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "state.bin"), bytes.Repeat([]byte{1}, 1000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := Open(Options{Dir: dir, NodeID: "n1", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ro.Close()
	last := ro.LastIndex
	if n := len(unfinishedDirs(t, dir)); n != 2 {
		t.Fatalf("a read-only open left %d of 2 unfinished snapshots", n)
	}
	s := mustOpen(t, dir)
	if left := unfinishedDirs(t, dir); len(left) != 0 {
		t.Fatalf("unfinished snapshots left: %v", left)
	}
	if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "removed 2 unfinished snapshots (2000 bytes)") {
		t.Fatalf("warnings %q", s.Warnings)
	}
	if after := snapshotDirs(t, dir); len(after) != len(before) || s.LastIndex != last {
		t.Fatalf("snapshots %v (were %v), last index %d", after, before, s.LastIndex)
	}
}

// TestFailedSnapshotsLeaveNothing: on a full disk, a snapshot that fails
// while written (Raft cancels it, and Cancel cannot flush) or at Create
// (its metadata cannot be written) leaves no directory behind: Raft's
// own store leaves both, and each retry would take more of the space
// freed to end the outage. Needs root, for a small tmpfs.
func TestFailedSnapshotsLeaveNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("a full disk needs a small tmpfs, which needs root (uid %d)", os.Geteuid())
	}
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		runtime.GC() // the state file a failed Cancel leaves open is closed when its sink is collected
		if exec.Command("umount", dir).Run() != nil {
			_ = exec.Command("umount", "-l", dir).Run()
		}
	})
	s := mustOpen(t, dir)

	sink, err := s.Snapshots.Create(raft.SnapshotVersionMax, 10, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{7}, 64<<10)
	var werr error
	for range 32 { // 2 MiB into 512 KiB
		if _, werr = sink.Write(chunk); werr != nil {
			break
		}
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing 2 MiB to a 512 KiB disk: %v", werr)
	}
	_ = sink.Cancel() // as Raft does when Persist fails
	if left := unfinishedDirs(t, dir); len(left) != 0 {
		t.Fatalf("a cancelled snapshot left %v", left)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if free := fs.Bavail * uint64(fs.Bsize); free < 256<<10 {
		t.Fatalf("%d bytes free after the cancelled snapshot was removed: its space was not given back", free)
	}

	// The disk full to the last byte: Create cannot write the metadata.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := filler.Write(chunk[:4096]); err != nil {
			break
		}
	}
	filler.Close()
	for i := range uint64(3) {
		if _, err := s.Snapshots.Create(raft.SnapshotVersionMax, 20+i, 1, raft.Configuration{}, 1, nil); err == nil {
			t.Fatal("Create succeeded on a full disk")
		}
	}
	if left := unfinishedDirs(t, dir); len(left) != 0 {
		t.Fatalf("failed Creates left %v", left)
	}
}
