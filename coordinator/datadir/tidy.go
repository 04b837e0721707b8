package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Unfinished snapshots. Raft's FileSnapshotStore writes a snapshot into
// snapshots/<id>.tmp and renames it when done, but leaves the directory
// behind when the metadata cannot be written at Create or Close, or when
// Cancel cannot flush: exactly what a full disk does. Each attempt Raft
// retries then leaves another partial copy of the state, and the space
// freed to end the outage fills again with them. A process killed while
// writing a snapshot leaves one too. Raft never reads them.
//
// SnapshotStore removes the directory of every snapshot that does not
// finish, and Open removes those a previous process left.

// SnapshotStore is Raft's file snapshot store, leaving nothing behind of
// a snapshot that fails.
type SnapshotStore struct {
	*raft.FileSnapshotStore
	root   string
	logger hclog.Logger
	// mu serialises Create, so that the directory a failed Create left is
	// told apart from another snapshot's in progress.
	mu sync.Mutex
}

func newSnapshotStore(dir string, retain int, logger hclog.Logger) (*SnapshotStore, error) {
	fs, err := raft.NewFileSnapshotStoreWithLogger(dir, retain, logger)
	if err != nil {
		return nil, err
	}
	return &SnapshotStore{FileSnapshotStore: fs, root: filepath.Join(dir, snapshotsDir), logger: logger}, nil
}

// Create implements raft.SnapshotStore.
func (s *SnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before, _ := s.unfinished()
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		// The directory Create made is the new one of this term and
		// index (snapshot IDs are term-index-milliseconds).
		after, _ := s.unfinished()
		prefix := fmt.Sprintf("%d-%d-", term, index)
		for name := range after {
			if _, ok := before[name]; !ok && strings.HasPrefix(name, prefix) {
				s.remove(name, err)
			}
		}
		return nil, err
	}
	return &tidySink{SnapshotSink: sink, store: s}, nil
}

// unfinished names the .tmp directories in the snapshot store.
func (s *SnapshotStore) unfinished() (map[string]struct{}, error) {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return nil, err
	}
	out := map[string]struct{}{}
	for _, e := range entries {
		if e.IsDir() && strings.HasSuffix(e.Name(), snapshotTmp) {
			out[e.Name()] = struct{}{}
		}
	}
	return out, nil
}

func (s *SnapshotStore) remove(name string, cause error) {
	path := filepath.Join(s.root, name)
	if _, err := discard(path); err != nil {
		s.logger.Error("could not remove an unfinished snapshot", "path", path, "error", err)
		return
	}
	s.logger.Warn("removed an unfinished snapshot", "path", path, "cause", cause)
}

// discard removes the directory at path and returns how many bytes its
// files held. The files are emptied first: a sink whose Cancel could not
// flush keeps its state file open (until the sink is collected), and a
// removed file's space is not freed while it is open; an emptied one's is.
func discard(path string) (int64, error) {
	var size int64
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
			_ = os.Truncate(p, 0)
		}
		return nil
	})
	return size, os.RemoveAll(path)
}

// tidySink removes its directory when the snapshot does not finish.
type tidySink struct {
	raft.SnapshotSink
	store *SnapshotStore
}

func (t *tidySink) Close() error {
	err := t.SnapshotSink.Close()
	if err != nil {
		t.removeIfLeft(err)
	}
	return err
}

func (t *tidySink) Cancel() error {
	err := t.SnapshotSink.Cancel()
	if err != nil {
		t.removeIfLeft(err)
	}
	return err
}

func (t *tidySink) removeIfLeft(cause error) {
	name := t.ID() + snapshotTmp
	if _, err := os.Stat(filepath.Join(t.store.root, name)); err == nil {
		t.store.remove(name, cause)
	}
}

// removeUnfinished removes the unfinished snapshots in dir's snapshot
// store, which nothing is writing yet, and says how many and how large.
func removeUnfinished(dir string) (n int, bytes int64, err error) {
	root := filepath.Join(dir, snapshotsDir)
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), snapshotTmp) {
			continue
		}
		path := filepath.Join(root, e.Name())
		size, err := discard(path)
		if err != nil {
			return n, bytes, fmt.Errorf("removing the unfinished snapshot %s: %w", path, err)
		}
		n, bytes = n+1, bytes+size
	}
	return n, bytes, nil
}
