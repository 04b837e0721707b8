package fsm

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

// FSM is the Raft state machine: a thin layer that decodes log entries and
// hands them to the state, and snapshots and restores it.
type FSM struct {
	mu      sync.RWMutex
	st      *state.State
	log     hclog.Logger
	applied func(state.Command, string) // observes each applied command (metrics)
	// view is the state's view as of the last entry applied, made by the
	// first View after it; nil until then.
	view atomic.Pointer[state.View]
}

// New returns an FSM over an empty state. applied, when not nil, is
// called with each command applied (its type without the ignorable bit)
// and the kind of the audit entry it recorded, or "".
func New(log hclog.Logger, applied func(t state.Command, audited string)) *FSM {
	return &FSM{st: state.New(), log: log, applied: applied}
}

// Read runs fn with the state locked for reading. fn must not keep what
// it reads past its return, nor change it.
func (f *FSM) Read(fn func(*state.State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.st)
}

// View returns the state as of the last entry applied, for reading
// without a lock (state.View): one per entry, made in O(1) by the first
// caller after it, shared by the others.
func (f *FSM) View() *state.View {
	if v := f.view.Load(); v != nil {
		return v
	}
	f.mu.Lock() // a view clones the trees, as a snapshot does
	defer f.mu.Unlock()
	if v := f.view.Load(); v != nil {
		return v
	}
	v := f.st.View()
	f.view.Store(v)
	return v
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if len(l.Data) == 0 {
		panic(fmt.Sprintf("coordinator: log entry %d is empty; refusing to continue with a log this node cannot read", l.Index))
	}
	t := state.Command(l.Data[0])
	m, ok := state.Message(t)
	if !ok {
		if t&state.Ignorable != 0 {
			f.log.Warn("skipping a log entry of a command type this version does not know", "index", l.Index, "type", uint8(t))
			return nil
		}
		panic(fmt.Sprintf("coordinator: log entry %d has unknown command type %d: this node is older than the cluster's log; upgrade it", l.Index, uint8(t)))
	}
	if err := proto.Unmarshal(l.Data[1:], m); err != nil {
		panic(fmt.Sprintf("coordinator: log entry %d (%v) does not decode: %v; refusing to let this replica diverge", l.Index, t, err))
	}
	f.mu.Lock()
	res := f.st.Apply(t, m)
	audited := f.st.Recorded()
	f.view.Store(nil)
	f.mu.Unlock()
	if f.applied != nil {
		f.applied(t&^state.Ignorable, audited)
	}
	return res
}

// CheckEntry decodes a command log entry as Apply would, without applying
// it: the start-up check of a member's log (datadir.Options.CheckEntry),
// so that an entry Apply would stop on is found before Raft starts.
func CheckEntry(l *raft.Log) error {
	if len(l.Data) == 0 {
		return errors.New("an empty command")
	}
	t := state.Command(l.Data[0])
	m, ok := state.Message(t)
	if !ok {
		if t&state.Ignorable != 0 {
			return nil
		}
		return fmt.Errorf("unknown command type %d: this version is older than the log (upgrade it)", uint8(t))
	}
	if err := proto.Unmarshal(l.Data[1:], m); err != nil {
		return fmt.Errorf("a %v command that does not decode: %v", t&^state.Ignorable, err)
	}
	return nil
}

// Snapshot implements raft.FSM. It clones the state's copy-on-write trees
// under the lock, in O(1) whatever the state's size (the write lock: a
// clone marks the trees, and Raft and a backup may snapshot at once), so
// that Persist can write the clone (in format 2, see state.Snapshot)
// without the lock while Apply goes on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &snapshot{f.st.Snapshot()}, nil
}

// Restore implements raft.FSM: it builds a fresh state from a snapshot and
// swaps it in.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := state.ReadSnapshot(rc)
	if err != nil {
		return fmt.Errorf("coordinator: restoring snapshot: %w", err)
	}
	f.mu.Lock()
	f.st = st
	f.view.Store(nil)
	f.mu.Unlock()
	return nil
}

type snapshot struct{ s *state.Snapshot }

// Persist implements raft.FSMSnapshot.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.s.Write(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("coordinator: writing snapshot: %w", err)
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s *snapshot) Release() {}
