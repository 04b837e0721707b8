package coordinator

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
)

// commandType is the first byte of every log entry; a protobuf payload
// follows. A type with the ignorable bit set may be skipped by a node too
// old to know it; any other unknown type stops the node, because applying
// the log partially would let replicas diverge.
type commandType uint8

const (
	cmdReports  commandType = 1
	cmdRules    commandType = 2
	cmdMember   commandType = 3
	cmdEpoch    commandType = 4
	cmdMaintain commandType = 5
	cmdSettings commandType = 6
	// cmdGrants is proposed with the ignorable bit: a member too old to
	// know it skips it and only loses the bill's granted shares.
	cmdGrants commandType = 7

	ignorable commandType = 0x80
)

func (t commandType) String() string {
	switch t &^ ignorable {
	case cmdReports:
		return "reports"
	case cmdRules:
		return "rules"
	case cmdMember:
		return "member"
	case cmdEpoch:
		return "epoch"
	case cmdMaintain:
		return "maintain"
	case cmdSettings:
		return "settings"
	case cmdGrants:
		return "grants"
	}
	return fmt.Sprintf("command(%d)", uint8(t))
}

// encodeCommand lays out a log entry: the type byte, then the payload.
func encodeCommand(t commandType, m proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{}.MarshalAppend([]byte{byte(t)}, m)
	if err != nil {
		return nil, fmt.Errorf("coordinator: encoding %v command: %w", t, err)
	}
	return b, nil
}

// handler applies one decoded command to the state, under the FSM's lock.
type handler struct {
	msg   func() proto.Message
	apply func(*state, proto.Message) any
}

// handlers is the table of command types, each the same shape: decode,
// apply, return.
var handlers = map[commandType]handler{
	cmdReports: {
		msg:   func() proto.Message { return &allotpb.ReportsCommand{} },
		apply: func(s *state, m proto.Message) any { return s.applyReports(m.(*allotpb.ReportsCommand)) },
	},
	cmdRules: {
		msg: func() proto.Message { return &allotpb.RulesCommand{} },
		apply: func(s *state, m proto.Message) any {
			if err := s.applyRules(m.(*allotpb.RulesCommand)); err != nil {
				return err
			}
			return s.rules
		},
	},
	cmdMember: {
		msg:   func() proto.Message { return &allotpb.MemberCommand{} },
		apply: func(s *state, m proto.Message) any { s.applyMember(m.(*allotpb.MemberCommand)); return nil },
	},
	cmdEpoch: {
		msg:   func() proto.Message { return &allotpb.EpochCommand{} },
		apply: func(s *state, m proto.Message) any { return s.applyEpoch(m.(*allotpb.EpochCommand)) },
	},
	cmdMaintain: {
		msg:   func() proto.Message { return &allotpb.MaintainCommand{} },
		apply: func(s *state, m proto.Message) any { s.maintain(m.(*allotpb.MaintainCommand)); return nil },
	},
	cmdSettings: {
		msg:   func() proto.Message { return &allotpb.SettingsCommand{} },
		apply: func(s *state, m proto.Message) any { s.applySettings(m.(*allotpb.SettingsCommand)); return nil },
	},
	cmdGrants: {
		msg:   func() proto.Message { return &allotpb.GrantsCommand{} },
		apply: func(s *state, m proto.Message) any { s.applyGrants(m.(*allotpb.GrantsCommand)); return nil },
	},
}

// fsm is the Raft state machine: a thin layer that decodes log entries and
// hands them to the state, and snapshots and restores it.
type fsm struct {
	mu      sync.RWMutex
	st      *state
	log     hclog.Logger
	applied func(commandType) // observes each applied command (metrics)
}

func newFSM(log hclog.Logger, applied func(commandType)) *fsm {
	return &fsm{st: newState(), log: log, applied: applied}
}

// read runs f with the state locked for reading.
func (f *fsm) read(fn func(*state)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.st)
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if len(l.Data) == 0 {
		panic(fmt.Sprintf("coordinator: log entry %d is empty; refusing to continue with a log this node cannot read", l.Index))
	}
	t := commandType(l.Data[0])
	h, ok := handlers[t&^ignorable]
	if !ok {
		if t&ignorable != 0 {
			f.log.Warn("skipping a log entry of a command type this version does not know", "index", l.Index, "type", uint8(t))
			return nil
		}
		panic(fmt.Sprintf("coordinator: log entry %d has unknown command type %d: this node is older than the cluster's log; upgrade it", l.Index, uint8(t)))
	}
	m := h.msg()
	if err := proto.Unmarshal(l.Data[1:], m); err != nil {
		panic(fmt.Sprintf("coordinator: log entry %d (%v) does not decode: %v; refusing to let this replica diverge", l.Index, t, err))
	}
	f.mu.Lock()
	res := h.apply(f.st, m)
	f.mu.Unlock()
	if f.applied != nil {
		f.applied(t &^ ignorable)
	}
	return res
}

// checkEntry decodes a command log entry as Apply would, without applying
// it: the start-up check of a member's log (datadir.Options.CheckEntry),
// so that an entry Apply would stop on is found before Raft starts.
func checkEntry(l *raft.Log) error {
	if len(l.Data) == 0 {
		return errors.New("an empty command")
	}
	t := commandType(l.Data[0])
	h, ok := handlers[t&^ignorable]
	if !ok {
		if t&ignorable != 0 {
			return nil
		}
		return fmt.Errorf("unknown command type %d: this version is older than the log (upgrade it)", uint8(t))
	}
	if err := proto.Unmarshal(l.Data[1:], h.msg()); err != nil {
		return fmt.Errorf("a %v command that does not decode: %v", t&^ignorable, err)
	}
	return nil
}

// snapshotFormat is the layout version written in every snapshot header.
// Format 1 has grown compatibly: the header's report interval and lease
// TTL (fields 9 and 10) are absent from older snapshots, which restore with
// those settings not fixed, for the next leader to fix; an older member
// restoring a newer snapshot ignores them and goes on with its own flags.
const snapshotFormat = 1

// Snapshot implements raft.FSM. It copies the state into messages while
// holding the lock, so that Persist can write them while Apply goes on.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.st
	snap := &snapshot{
		header: &allotpb.SnapshotHeader{
			Format: snapshotFormat, Epoch: s.epoch, RulesVersion: s.rules.Version(),
			Incarnations: uint64(len(s.incarnations)), LedgerRecords: uint64(len(s.ledger)),
			Members: uint64(len(s.members)), Windows: uint64(len(s.open)),
			BillingWindowNano: s.billingWindow, ReportIntervalNano: s.reportInterval, LeaseTtlNano: s.leaseTTL,
			GrantEpoch: s.grantEpoch, GrantSeq: s.grantSeq, ClusterId: s.clusterID,
		},
		rules: rulespb.SetToProto(s.rules),
	}
	for _, m := range s.members {
		snap.members = append(snap.members, proto.Clone(m).(*allotpb.Member))
	}
	for k, inc := range s.incarnations {
		snap.incarnations = append(snap.incarnations, &allotpb.IncarnationRecord{
			Node: k.node, Incarnation: k.incarnation, LastSeq: inc.lastSeq,
			LastAppliedUnixNano: inc.lastApplied, LastCutUnixNano: inc.lastCut,
		})
	}
	snap.ledger = make([]*allotpb.LedgerRecord, 0, len(s.ledger))
	s.index.Ascend(func(k ledgerKey) bool { // in order, so that equal states write equal snapshots
		u := s.ledger[k]
		snap.ledger = append(snap.ledger, &allotpb.LedgerRecord{
			Tenant: k.tenant, Rule: k.rule, Region: k.region, WindowUnix: k.window,
			Admitted: u.admitted, Denied: u.denied, Final: s.final[k.window], Granted: u.granted,
		})
		return true
	})
	for w, reporters := range s.open {
		rec := &allotpb.WindowRecord{WindowUnix: w}
		for k := range reporters {
			rec.Reporters = append(rec.Reporters, encodeIncKey(k))
		}
		snap.windows = append(snap.windows, rec)
	}
	for w := range s.final {
		snap.finals = append(snap.finals, w)
	}
	return snap, nil
}

// Restore implements raft.FSM: it builds a fresh state from a snapshot and
// swaps it in.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := readSnapshot(bufio.NewReader(rc))
	if err != nil {
		return fmt.Errorf("coordinator: restoring snapshot: %w", err)
	}
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
	return nil
}

type snapshot struct {
	header       *allotpb.SnapshotHeader
	rules        *allotpb.RuleSet
	members      []*allotpb.Member
	incarnations []*allotpb.IncarnationRecord
	ledger       []*allotpb.LedgerRecord
	windows      []*allotpb.WindowRecord
	finals       []int64
}

// Persist writes the snapshot: a header giving the count of each section,
// then the sections, each a run of length-delimited messages.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriter(sink)
	err := func() error {
		write := func(m proto.Message) error {
			_, err := protodelim.MarshalTo(w, m)
			return err
		}
		if err := write(s.header); err != nil {
			return err
		}
		if err := write(s.rules); err != nil {
			return err
		}
		for _, m := range s.members {
			if err := write(m); err != nil {
				return err
			}
		}
		for _, m := range s.incarnations {
			if err := write(m); err != nil {
				return err
			}
		}
		for _, m := range s.ledger {
			if err := write(m); err != nil {
				return err
			}
		}
		for _, m := range s.windows {
			if err := write(m); err != nil {
				return err
			}
		}
		if err := write(&allotpb.FinalWindows{WindowUnix: s.finals}); err != nil {
			return err
		}
		return w.Flush()
	}()
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("coordinator: writing snapshot: %w", err)
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s *snapshot) Release() {}

func readSnapshot(r *bufio.Reader) (*state, error) {
	opts := protodelim.UnmarshalOptions{MaxSize: 64 << 20}
	read := func(m proto.Message) error {
		if err := opts.UnmarshalFrom(r, m); err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		return nil
	}
	h := &allotpb.SnapshotHeader{}
	if err := read(h); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if h.GetFormat() != snapshotFormat {
		return nil, fmt.Errorf("snapshot format %d, this version reads %d", h.GetFormat(), snapshotFormat)
	}
	st := newState()
	st.epoch, st.billingWindow = h.GetEpoch(), h.GetBillingWindowNano()
	st.reportInterval, st.leaseTTL = h.GetReportIntervalNano(), h.GetLeaseTtlNano()
	st.grantEpoch, st.grantSeq = h.GetGrantEpoch(), h.GetGrantSeq()
	st.clusterID = h.GetClusterId()
	rs := &allotpb.RuleSet{}
	if err := read(rs); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	set, err := rulespb.SetFromProto(rs)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	st.rules = set
	for i := uint64(0); i < h.GetMembers(); i++ {
		m := &allotpb.Member{}
		if err := read(m); err != nil {
			return nil, fmt.Errorf("member %d: %w", i, err)
		}
		st.members[m.GetId()] = m
	}
	for i := uint64(0); i < h.GetIncarnations(); i++ {
		m := &allotpb.IncarnationRecord{}
		if err := read(m); err != nil {
			return nil, fmt.Errorf("incarnation %d: %w", i, err)
		}
		st.incarnations[incKey{m.GetNode(), m.GetIncarnation()}] = &incarnation{
			lastSeq: m.GetLastSeq(), lastApplied: m.GetLastAppliedUnixNano(), lastCut: m.GetLastCutUnixNano(),
		}
	}
	for i := uint64(0); i < h.GetLedgerRecords(); i++ {
		m := &allotpb.LedgerRecord{}
		if err := read(m); err != nil {
			return nil, fmt.Errorf("ledger record %d: %w", i, err)
		}
		k := ledgerKey{m.GetTenant(), m.GetRule(), m.GetRegion(), m.GetWindowUnix()}
		if _, dup := st.ledger[k]; dup {
			return nil, fmt.Errorf("ledger record %d: a second line for %s/%s/%s/%d", i, k.tenant, k.rule, k.region, k.window)
		}
		st.putLedger(k, &usage{admitted: m.GetAdmitted(), denied: m.GetDenied(), granted: m.Granted})
		if m.GetFinal() {
			st.final[m.GetWindowUnix()] = true
		}
	}
	for i := uint64(0); i < h.GetWindows(); i++ {
		m := &allotpb.WindowRecord{}
		if err := read(m); err != nil {
			return nil, fmt.Errorf("window %d: %w", i, err)
		}
		reporters := map[incKey]struct{}{}
		for _, s := range m.GetReporters() {
			k, err := decodeIncKey(s)
			if err != nil {
				return nil, fmt.Errorf("window %d: %w", m.GetWindowUnix(), err)
			}
			reporters[k] = struct{}{}
		}
		st.open[m.GetWindowUnix()] = reporters
	}
	finals := &allotpb.FinalWindows{}
	if err := read(finals); err != nil {
		return nil, fmt.Errorf("final windows: %w", err)
	}
	for _, w := range finals.GetWindowUnix() {
		st.final[w] = true
	}
	return st, nil
}

// encodeIncKey writes an incarnation key as "incarnation/node" (the node
// last, as it may contain any character).
func encodeIncKey(k incKey) string { return fmt.Sprintf("%d/%s", k.incarnation, k.node) }

func decodeIncKey(s string) (incKey, error) {
	var k incKey
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			if _, err := fmt.Sscan(s[:i], &k.incarnation); err != nil {
				return k, fmt.Errorf("incarnation key %q: %w", s, err)
			}
			k.node = s[i+1:]
			return k, nil
		}
	}
	return k, fmt.Errorf("incarnation key %q has no '/'", s)
}
