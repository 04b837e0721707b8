package state

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
)

// snapshotFormat is the layout version written in every snapshot header.
// Format 1 has grown compatibly: the header's report interval and lease
// TTL (fields 9 and 10) are absent from older snapshots, which restore with
// those settings not fixed, for the next leader to fix; an older member
// restoring a newer snapshot ignores them and goes on with its own flags.
const snapshotFormat = 1

// maxRecord bounds one record of a snapshot as it is read.
const maxRecord = 64 << 20

// Snapshot is a state taken for writing: Write may run while the state
// goes on changing.
type Snapshot struct {
	header       *fsmpb.SnapshotHeader
	rules        *allotpb.RuleSet
	members      []*allotpb.Member
	incarnations []*fsmpb.IncarnationRecord
	ledger       []*fsmpb.LedgerRecord
	windows      []*fsmpb.WindowRecord
	finals       []int64
}

// Snapshot copies the state into messages, for Write; the caller holds
// the lock that keeps the state from changing meanwhile.
func (s *State) Snapshot() *Snapshot {
	snap := &Snapshot{
		header: &fsmpb.SnapshotHeader{
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
		snap.incarnations = append(snap.incarnations, &fsmpb.IncarnationRecord{
			Node: k.node, Incarnation: k.incarnation, LastSeq: inc.lastSeq,
			LastAppliedUnixNano: inc.lastApplied, LastCutUnixNano: inc.lastCut,
		})
	}
	snap.ledger = make([]*fsmpb.LedgerRecord, 0, len(s.ledger))
	s.index.Ascend(func(k LedgerKey) bool { // in order, so that equal states write equal snapshots
		u := s.ledger[k]
		snap.ledger = append(snap.ledger, &fsmpb.LedgerRecord{
			Tenant: k.Tenant, Rule: k.Rule, Region: k.Region, WindowUnix: k.Window,
			Admitted: u.admitted, Denied: u.denied, Final: s.final[k.Window], Granted: u.granted,
		})
		return true
	})
	for w, reporters := range s.open {
		rec := &fsmpb.WindowRecord{WindowUnix: w}
		for k := range reporters {
			rec.Reporters = append(rec.Reporters, encodeIncKey(k))
		}
		snap.windows = append(snap.windows, rec)
	}
	for w := range s.final {
		snap.finals = append(snap.finals, w)
	}
	return snap
}

// Write writes the snapshot: a header giving the count of each section,
// then the sections, each a run of length-delimited messages.
func (s *Snapshot) Write(out io.Writer) error {
	w := bufio.NewWriter(out)
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
	if err := write(&fsmpb.FinalWindows{WindowUnix: s.finals}); err != nil {
		return err
	}
	return w.Flush()
}

// ReadHeader reads a snapshot's header, for tools that only need what it
// says (the cluster ID).
func ReadHeader(r io.Reader) (*fsmpb.SnapshotHeader, error) {
	h := &fsmpb.SnapshotHeader{}
	if err := (protodelim.UnmarshalOptions{MaxSize: 1 << 20}).UnmarshalFrom(bufio.NewReader(r), h); err != nil {
		return nil, fmt.Errorf("snapshot header: %w", err)
	}
	return h, nil
}

// ReadSnapshot builds a state from a snapshot.
func ReadSnapshot(in io.Reader) (*State, error) {
	r := bufio.NewReader(in)
	opts := protodelim.UnmarshalOptions{MaxSize: maxRecord}
	read := func(m proto.Message) error {
		if err := opts.UnmarshalFrom(r, m); err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		return nil
	}
	h := &fsmpb.SnapshotHeader{}
	if err := read(h); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if h.GetFormat() != snapshotFormat {
		return nil, fmt.Errorf("snapshot format %d, this version reads %d", h.GetFormat(), snapshotFormat)
	}
	st := New()
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
		m := &fsmpb.IncarnationRecord{}
		if err := read(m); err != nil {
			return nil, fmt.Errorf("incarnation %d: %w", i, err)
		}
		st.incarnations[incKey{m.GetNode(), m.GetIncarnation()}] = &incarnation{
			lastSeq: m.GetLastSeq(), lastApplied: m.GetLastAppliedUnixNano(), lastCut: m.GetLastCutUnixNano(),
		}
	}
	for i := uint64(0); i < h.GetLedgerRecords(); i++ {
		m := &fsmpb.LedgerRecord{}
		if err := read(m); err != nil {
			return nil, fmt.Errorf("ledger record %d: %w", i, err)
		}
		k := LedgerKey{m.GetTenant(), m.GetRule(), m.GetRegion(), m.GetWindowUnix()}
		if _, dup := st.ledger[k]; dup {
			return nil, fmt.Errorf("ledger record %d: a second line for %s/%s/%s/%d", i, k.Tenant, k.Rule, k.Region, k.Window)
		}
		st.putLedger(k, &usage{admitted: m.GetAdmitted(), denied: m.GetDenied(), granted: m.Granted})
		if m.GetFinal() {
			st.final[m.GetWindowUnix()] = true
		}
	}
	for i := uint64(0); i < h.GetWindows(); i++ {
		m := &fsmpb.WindowRecord{}
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
	finals := &fsmpb.FinalWindows{}
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
