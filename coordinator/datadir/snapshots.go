package datadir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/raft"
)

// The layout of hashicorp/raft's FileSnapshotStore: DIR/snapshots/ID/
// meta.json (the metadata, with a CRC-64 (ECMA) of state.bin) and
// state.bin; a directory ending in .tmp is a snapshot being written.
const (
	snapshotsDir  = "snapshots"
	snapshotMeta  = "meta.json"
	snapshotState = "state.bin"
	snapshotTmp   = ".tmp"
)

// snapshotInfo is one snapshot as the check found it.
type snapshotInfo struct {
	id           string
	index, term  uint64
	dir, problem string // problem is why it cannot be restored, or ""
}

// fileSnapshotMeta is meta.json (raft.fileSnapshotMeta, unexported there).
type fileSnapshotMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// checkSnapshots lists the snapshots Raft will consider (the retain newest
// whose metadata it can read, newest first, as FileSnapshotStore.List
// orders them) and checks each one's size and CRC, as Raft's Open will,
// so that the caller knows which one Raft restores before it starts.
// Directories with unreadable metadata, which Raft skips, are returned as
// skipped.
func checkSnapshots(dir string, retain int) (list []snapshotInfo, skipped []snapshotInfo, err error) {
	root := filepath.Join(dir, snapshotsDir)
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	type found struct {
		meta fileSnapshotMeta
		info snapshotInfo
	}
	var all []found
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), snapshotTmp) {
			continue
		}
		info := snapshotInfo{id: e.Name(), dir: filepath.Join(root, e.Name())}
		b, err := os.ReadFile(filepath.Join(info.dir, snapshotMeta))
		var m fileSnapshotMeta
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil {
			info.problem = fmt.Sprintf("its %s is unreadable (%v)", snapshotMeta, err)
			skipped = append(skipped, info)
			continue
		}
		if m.Version < raft.SnapshotVersionMin || m.Version > raft.SnapshotVersionMax {
			info.problem = fmt.Sprintf("snapshot version %d is not one Raft reads", m.Version)
			skipped = append(skipped, info)
			continue
		}
		info.index, info.term = m.Index, m.Term
		all = append(all, found{meta: m, info: info})
	}
	// Raft's order: term, then index, then ID; newest first.
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i].meta, all[j].meta
		if a.Term != b.Term {
			return a.Term > b.Term
		}
		if a.Index != b.Index {
			return a.Index > b.Index
		}
		return a.ID > b.ID
	})
	if len(all) > retain {
		all = all[:retain]
	}
	for _, f := range all {
		f.info.problem = checkSnapshotState(f.info.dir, &f.meta)
		list = append(list, f.info)
	}
	return list, skipped, nil
}

// checkSnapshotState says what is wrong with a snapshot's state.bin, or "".
func checkSnapshotState(dir string, m *fileSnapshotMeta) string {
	path := filepath.Join(dir, snapshotState)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("its %s cannot be opened (%v)", snapshotState, err)
	}
	defer f.Close()
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Sprintf("reading its %s: %v", snapshotState, err)
	}
	if n != m.Size {
		return fmt.Sprintf("its %s is %d bytes, its metadata says %d (truncated)", snapshotState, n, m.Size)
	}
	if !bytes.Equal(h.Sum(nil), m.CRC) {
		return fmt.Sprintf("its %s fails its CRC check (corrupt)", snapshotState)
	}
	return ""
}
