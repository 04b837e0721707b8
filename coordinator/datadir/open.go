package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The runbook sections of docs/operations.md that errors point to.
const (
	RunbookCorrupt  = "docs/operations.md#runbook-a-corrupt-raft-store"
	RunbookLostDisk = "docs/operations.md#runbook-a-member-lost-its-disk"
	RunbookQuorum   = "docs/operations.md#runbook-a-lost-quorum"
	RunbookDiskFull = "docs/operations.md#runbook-a-full-disk"
)

// Sentinel errors, wrapped by every Error of their kind.
var (
	// ErrCorrupt: the Raft store or the snapshots are damaged.
	ErrCorrupt = errors.New("datadir: damaged")
	// ErrInUse: another process holds the Raft store.
	ErrInUse = errors.New("datadir: in use by another process")
	// ErrIdentity: the identity file is unreadable, or names another node
	// or cluster.
	ErrIdentity = errors.New("datadir: identity mismatch")
	// ErrLostLog: snapshots remain but the log and stable store are gone.
	ErrLostLog = errors.New("datadir: log lost")
)

// Error is a data directory that cannot be used as it is. Its message is
// one line: the file, what is wrong, that nothing was changed, and the
// runbook section that says what to do.
type Error struct {
	Path    string
	Problem string
	Runbook string
	kind    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s; nothing was changed; see %s", e.Path, e.Problem, e.Runbook)
}

// Unwrap returns the Error's sentinel.
func (e *Error) Unwrap() error { return e.kind }

// State is what a data directory holds.
type State int

const (
	// Fresh: no Raft state and no identity; a member that never belonged
	// to a cluster.
	Fresh State = iota
	// Existing: a Raft log, a term or a snapshot.
	Existing
	// Lost: an identity but no Raft state. The member belonged to a
	// cluster and lost its store: it must rejoin that cluster, never
	// form a new one.
	Lost
)

func (s State) String() string {
	switch s {
	case Fresh:
		return "fresh"
	case Existing:
		return "existing"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Options configure Open.
type Options struct {
	// Dir is the data directory; created (mode 0700) when missing.
	Dir string
	// NodeID is the member opening it; an identity naming another node
	// is refused.
	NodeID string
	// CheckEntry decodes a command log entry as the state machine would,
	// without applying it; nil checks only that entries decode as Raft
	// log entries.
	CheckEntry func(*raft.Log) error
	// RetainSnapshots is how many snapshots Raft keeps (default 3).
	RetainSnapshots int
	// LockWait is how long to wait for another process's lock on the
	// Raft store before saying it is in use (default 1s).
	LockWait time.Duration
	// Logger receives the snapshot store's logs; nil discards them.
	Logger hclog.Logger
	// ReadOnly opens the Raft store read-only, beside a process that may
	// hold it (allot cluster inspect); a missing directory is an error.
	ReadOnly bool
}

// Store is an opened, checked data directory.
type Store struct {
	Dir string
	// Log is the Raft log and stable store.
	Log *raftboltdb.BoltStore
	// Snapshots is the Raft snapshot store.
	Snapshots *SnapshotStore
	State     State
	// Identity is the directory's identity file, nil when it has none.
	Identity *Identity
	// FirstIndex and LastIndex are the log's span (0 when empty), and
	// SnapshotIndex the index of the snapshot Raft restores (0: none).
	FirstIndex, LastIndex, SnapshotIndex uint64
	// Warnings are what the checks found that does not stop the member,
	// such as a damaged newest snapshot that Raft falls back from.
	Warnings []string
}

// Close closes the Raft store.
func (s *Store) Close() error { return s.Log.Close() }

const raftDB = "raft.db"

// Open checks the data directory and opens its Raft store and snapshot
// store. When a check fails it returns an *Error and changes nothing.
func Open(o Options) (*Store, error) {
	if o.RetainSnapshots <= 0 {
		o.RetainSnapshots = 3
	}
	if o.LockWait <= 0 {
		o.LockWait = time.Second
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	s := &Store{Dir: o.Dir}
	if st, err := os.Stat(o.Dir); err == nil && !st.IsDir() {
		return nil, &Error{Path: o.Dir, Problem: "is not a directory", Runbook: RunbookLostDisk, kind: ErrIdentity}
	}
	var err error
	if s.Identity, err = ReadIdentity(o.Dir); err != nil {
		return nil, err
	}
	if id := s.Identity; id != nil && id.NodeID != o.NodeID {
		return nil, &Error{Path: filepath.Join(o.Dir, identityFile), Problem: fmt.Sprintf("says this is the data of node %q, not %q: start %q with it, or give %q a data dir of its own", id.NodeID, o.NodeID, id.NodeID, o.NodeID), Runbook: RunbookLostDisk, kind: ErrIdentity}
	}
	dbPath := filepath.Join(o.Dir, raftDB)
	// Snapshots first: the log may lack entries a snapshot covers (Raft
	// leaves the index of a restored snapshot without an entry).
	snaps, skipped, err := checkSnapshots(o.Dir, o.RetainSnapshots)
	if err != nil {
		return nil, fmt.Errorf("datadir: listing snapshots: %w", err)
	}
	for _, sk := range skipped {
		s.Warnings = append(s.Warnings, fmt.Sprintf("snapshot %s is ignored: %s", sk.dir, sk.problem))
	}
	covered := uint64(0)
	for _, sn := range snaps {
		if sn.problem == "" {
			covered = sn.index
			break
		}
	}
	var info storeInfo
	hasDB := false
	if st, err := os.Stat(dbPath); err == nil && st.Size() > 0 {
		hasDB = true
		var problem string
		info, problem, err = checkRaftStore(dbPath, o.LockWait, covered, o.CheckEntry)
		if errors.Is(err, errInUse) {
			return nil, inUse(dbPath, o.Dir)
		}
		if err != nil {
			return nil, fmt.Errorf("datadir: checking %s: %w", dbPath, err)
		}
		if problem != "" {
			return nil, &Error{Path: dbPath, Problem: "is damaged: " + problem, Runbook: RunbookCorrupt, kind: ErrCorrupt}
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("datadir: %w", err)
	}
	if err := s.pickSnapshot(snaps, info); err != nil {
		return nil, err
	}
	if !hasDB && len(snaps) > 0 {
		return nil, &Error{Path: dbPath, Problem: fmt.Sprintf("is missing or empty, but %d snapshots remain in %s: the member's log, term and vote are gone, and it must not vote with a forgotten term", len(snaps), filepath.Join(o.Dir, snapshotsDir)), Runbook: RunbookLostDisk, kind: ErrLostLog}
	}
	s.FirstIndex, s.LastIndex = info.first, info.last
	switch {
	case info.last > 0 || info.term > 0 || len(snaps) > 0:
		s.State = Existing
	case s.Identity != nil:
		s.State = Lost
	default:
		s.State = Fresh
	}
	if o.ReadOnly {
		if !hasDB {
			return nil, &Error{Path: dbPath, Problem: "is missing or empty: there is no Raft state to read", Runbook: RunbookLostDisk, kind: ErrLostLog}
		}
	} else if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("datadir: %w", err)
	}
	s.Log, err = raftboltdb.New(raftboltdb.Options{Path: dbPath, BoltOptions: &bbolt.Options{Timeout: o.LockWait, ReadOnly: o.ReadOnly}})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, inUse(dbPath, o.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("datadir: opening %s: %w", dbPath, err)
	}
	if !o.ReadOnly {
		n, size, err := removeUnfinished(o.Dir)
		if err != nil {
			s.Log.Close()
			return nil, fmt.Errorf("datadir: %w", err)
		}
		if n > 0 {
			s.Warnings = append(s.Warnings, fmt.Sprintf("removed %d unfinished snapshots (%d bytes) from %s: a full disk or a crash while Raft wrote them; Raft never reads them", n, size, filepath.Join(o.Dir, snapshotsDir)))
		}
	}
	if s.Snapshots, err = newSnapshotStore(o.Dir, o.RetainSnapshots, o.Logger); err != nil {
		s.Log.Close()
		return nil, fmt.Errorf("datadir: snapshot store: %w", err)
	}
	return s, nil
}

func inUse(path, dir string) error {
	return &Error{Path: path, Problem: fmt.Sprintf("is locked by another process: is another allot coordinator running with --data-dir %s?", dir), Runbook: RunbookCorrupt, kind: ErrInUse}
}

// pickSnapshot finds the snapshot Raft will restore (the newest intact
// one), warns of each damaged one it falls back from, and refuses a
// fallback that would leave a gap between the snapshot and the log.
func (s *Store) pickSnapshot(snaps []snapshotInfo, info storeInfo) error {
	var bad []string
	chosen := -1
	for i, sn := range snaps {
		if sn.problem == "" {
			chosen = i
			break
		}
		bad = append(bad, fmt.Sprintf("snapshot %s (index %d) is damaged: %s", sn.id, sn.index, sn.problem))
	}
	root := filepath.Join(s.Dir, snapshotsDir)
	if chosen < 0 {
		if len(snaps) > 0 {
			return &Error{Path: root, Problem: "holds no intact snapshot: " + strings.Join(bad, "; "), Runbook: RunbookCorrupt, kind: ErrCorrupt}
		}
		if info.first > 1 {
			return &Error{Path: filepath.Join(s.Dir, raftDB), Problem: fmt.Sprintf("holds the log from entry %d on, but there is no snapshot of the entries before it", info.first), Runbook: RunbookCorrupt, kind: ErrCorrupt}
		}
		return nil
	}
	sn := snaps[chosen]
	if info.last > 0 && info.first > sn.index+1 {
		return &Error{Path: root, Problem: fmt.Sprintf("cannot be fallen back on: the newest intact snapshot, %s, ends at entry %d, but the log starts at entry %d (the damaged newer ones held the entries between: %s)", sn.id, sn.index, info.first, strings.Join(bad, "; ")), Runbook: RunbookCorrupt, kind: ErrCorrupt}
	}
	for _, b := range bad {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%s; falling back to the older %s (index %d), then the log", b, sn.id, sn.index))
	}
	s.SnapshotIndex = sn.index
	return nil
}
