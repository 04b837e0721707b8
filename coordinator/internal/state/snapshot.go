package state

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// snapshotFormat is the layout written in every snapshot header: format
// 2, a stream of type-tagged records (fsmpb's SnapshotHeader says how it
// is laid out). Format 1, positional, is still read (snapshot1.go).
const snapshotFormat = 2

// record is the type byte before each record of a format 2 snapshot. As
// with commands, a type with the Ignorable bit may be skipped by a reader
// that does not know it; a reader stops on any other type it does not
// know. New state adds a record type, not a format.
type record uint8

// The record types, in the order they are written. recHeader is also how
// a reader tells format 2 from format 1: a format 1 snapshot starts with
// its header's length, never 1 (the header alone holds a 2-byte format
// field) and, when 128 or more, a byte with the high bit set.
const (
	recHeader      record = 1
	recRules       record = 2
	recMember      record = 3
	recIncarnation record = 4
	recLedger      record = 5
	recWindow      record = 6
	recFinals      record = 7
	recEnd         record = 8
	// Written only by a shard group that took a step, and by the home
	// group of a split region; not ignorable (see CmdSlots).
	recSlots    record = 9
	recShardMap record = 10
	// One per override, tombstones included; not ignorable (see
	// CmdOverrides).
	recOverride record = 11
	// One per audit entry, by seq; ignorable: an older reader goes
	// without the audit log, as it ignores the entries commands carry.
	recAudit = 12 | recIgnorable
	// One per reset kept, oldest first; not ignorable (see CmdReset).
	recReset record = 13
	// One per notice tally, by rule, tenant and cycle, then one per
	// notice, by key; ignorable: an older reader keeps no notices, as it
	// records none (see CmdNoticesDelivered).
	recTally  = 14 | recIgnorable
	recNotice = 15 | recIgnorable

	recIgnorable record = 0x80
)

// ErrSnapshotFormat is returned for a snapshot this version cannot read:
// an unknown format or record type, or a snapshot cut short.
var ErrSnapshotFormat = errors.New("not a snapshot this version reads")

// maxRecord bounds one record of a snapshot as it is read.
const maxRecord = 64 << 20

// Snapshot is a state taken for writing: Write may run while the state
// it was taken from goes on changing.
type Snapshot struct{ st *State }

// Snapshot takes the state for Write; the caller holds the lock that keeps
// the state from changing meanwhile.
func (s *State) Snapshot() *Snapshot { return &Snapshot{st: s.frozen()} }

// Write writes the snapshot in format 2: the header, then each section in
// its order, then the end record. Equal states write equal bytes.
func (sn *Snapshot) Write(out io.Writer) error {
	s := sn.st
	w := &recordWriter{w: bufio.NewWriter(out)}
	w.write(recHeader, &fsmpb.SnapshotHeader{
		Format: snapshotFormat, Epoch: s.epoch, RulesVersion: s.rules.Version(),
		BillingWindowNano: s.billingWindow, ReportIntervalNano: s.reportInterval, LeaseTtlNano: s.leaseTTL,
		GrantEpoch: s.grantEpoch, GrantSeq: s.grantSeq, ClusterId: s.clusterID,
		Export: PositionProto(s.export), RetentionDroppedLines: s.retentionDropped,
		OverridesVersion: s.ov.version, OverridesFloor: s.ov.floor, OverridesMirror: s.ov.mirror,
		AuditSeq:      s.audit.seq,
		ResetsVersion: s.resets.version, ResetsFloor: s.resets.floor, ResetsMirror: s.resets.mirror,
	})
	rs := rulespb.SetToProto(s.rules)
	slices.SortFunc(rs.Rules, func(a, b *allotpb.Rule) int { return strings.Compare(a.GetName(), b.GetName()) })
	w.write(recRules, rs)
	s.eachMember(func(m *allotpb.Member) { w.write(recMember, m) })
	s.eachRun(func(k incKey, inc incarnation) {
		w.write(recIncarnation, &fsmpb.IncarnationRecord{
			Node: k.node, Incarnation: k.incarnation, LastSeq: inc.lastSeq,
			LastAppliedUnixNano: inc.lastApplied, LastCutUnixNano: inc.lastCut, Left: inc.left,
		})
	})
	s.eachLine(func(k ledger.Key, u usage) {
		w.write(recLedger, &fsmpb.LedgerRecord{
			Tenant: k.Tenant, Rule: k.Rule, Region: k.Region, WindowUnix: k.Window,
			Admitted: u.admitted, Denied: u.denied, Granted: u.granted,
			CycleStartUnix: u.terms.CycleStart, Limit: u.terms.Limit, Overage: u.overage,
		})
	})
	s.eachOpen(func(window int64, reporters []incKey) {
		rec := &fsmpb.WindowRecord{WindowUnix: window, Reporters: make([]string, len(reporters))}
		for i, k := range reporters {
			rec.Reporters[i] = encodeIncKey(k)
		}
		w.write(recWindow, rec)
	})
	w.write(recFinals, &fsmpb.FinalWindows{WindowUnix: s.finalWindows()})
	if rec := s.slotsRecord(); rec != nil {
		w.write(recSlots, rec)
	}
	if s.shardMap != nil {
		w.write(recShardMap, s.shardMap.Proto())
	}
	s.eachOverride(func(o *allotpb.Override) { w.write(recOverride, o) })
	s.eachAudit(func(e *allotpb.AuditEntry) { w.write(recAudit, e) })
	s.eachReset(func(r *allotpb.Reset) { w.write(recReset, r) })
	s.eachTally(func(t *fsmpb.TallyRecord) { w.write(recTally, t) })
	s.EachNotice(false, func(n *allotpb.Notice) bool { w.write(recNotice, n); return true })
	w.write(recEnd, &fsmpb.SnapshotEnd{Records: w.records})
	if w.err != nil {
		return w.err
	}
	return w.w.Flush()
}

// recordWriter writes records, keeping the first error.
type recordWriter struct {
	w       *bufio.Writer
	buf     []byte
	records uint64
	err     error
}

func (w *recordWriter) write(t record, m proto.Message) {
	if w.err != nil {
		return
	}
	var err error
	if w.buf, err = (proto.MarshalOptions{Deterministic: true}).MarshalAppend(w.buf[:0], m); err != nil {
		w.err = fmt.Errorf("encoding a snapshot record of type %d: %w", t, err)
		return
	}
	head := protowire.AppendVarint([]byte{byte(t)}, uint64(len(w.buf)))
	if _, err := w.w.Write(head); err != nil {
		w.err = err
		return
	}
	if _, err := w.w.Write(w.buf); err != nil {
		w.err = err
		return
	}
	if t != recEnd {
		w.records++
	}
}

// ReadHeader reads a snapshot's header, in either format, for tools that
// only need what it says (the cluster ID).
func ReadHeader(in io.Reader) (*fsmpb.SnapshotHeader, error) {
	r := bufio.NewReader(in)
	first, err := r.Peek(1)
	if err != nil {
		return nil, fmt.Errorf("snapshot header: %w", err)
	}
	if record(first[0]) == recHeader {
		rr := &recordReader{r: r}
		t, payload, err := rr.next()
		if err != nil {
			return nil, err
		}
		return readHeaderRecord(t, payload)
	}
	h := &fsmpb.SnapshotHeader{}
	if err := readDelimited(r, h); err != nil {
		return nil, fmt.Errorf("snapshot header: %w", err)
	}
	return h, nil
}

// ReadSnapshot builds a state from a snapshot of either format.
func ReadSnapshot(in io.Reader) (*State, error) {
	r := bufio.NewReader(in)
	first, err := r.Peek(1)
	if err != nil {
		return nil, fmt.Errorf("%w: an empty snapshot (%v)", ErrSnapshotFormat, err)
	}
	read := func() (*State, error) { return readFormat2(&recordReader{r: r}) }
	if record(first[0]) != recHeader {
		read = func() (*State, error) { return readFormat1(r) }
	}
	st, err := read()
	if err != nil {
		return nil, err
	}
	st.countFinalLines()
	return st, nil
}

func readHeaderRecord(t record, payload []byte) (*fsmpb.SnapshotHeader, error) {
	h := &fsmpb.SnapshotHeader{}
	if t != recHeader {
		return nil, fmt.Errorf("%w: the first record is of type %d, not a header", ErrSnapshotFormat, t)
	}
	if err := proto.Unmarshal(payload, h); err != nil {
		return nil, fmt.Errorf("snapshot header: %w", err)
	}
	if h.GetFormat() != snapshotFormat {
		return nil, fmt.Errorf("%w: snapshot format %d, this version reads 1 and %d", ErrSnapshotFormat, h.GetFormat(), snapshotFormat)
	}
	return h, nil
}

// recordReader reads a format 2 snapshot's records.
type recordReader struct {
	r *bufio.Reader
	n uint64 // records read
}

// next reads one record: its type and payload. io.EOF only at a record's
// boundary.
func (rr *recordReader) next() (record, []byte, error) {
	b, err := rr.r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	rr.n++
	size, err := binary.ReadUvarint(rr.r)
	if err != nil {
		return 0, nil, fmt.Errorf("snapshot record %d (type %d): its length: %w", rr.n, b, noEOF(err))
	}
	if size > maxRecord {
		return 0, nil, fmt.Errorf("snapshot record %d (type %d): %d bytes, more than the %d a record may hold", rr.n, b, size, maxRecord)
	}
	payload := make([]byte, size)
	if _, err := io.ReadFull(rr.r, payload); err != nil {
		return 0, nil, fmt.Errorf("snapshot record %d (type %d): %w", rr.n, b, noEOF(err))
	}
	return record(b), payload, nil
}

func readFormat2(rr *recordReader) (*State, error) {
	t, payload, err := rr.next()
	if err != nil {
		return nil, fmt.Errorf("snapshot header: %w", noEOF(err))
	}
	h, err := readHeaderRecord(t, payload)
	if err != nil {
		return nil, err
	}
	st := New()
	st.setHeader(h)
	for {
		t, payload, err := rr.next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: the snapshot ends after %d records without its end record: it was cut short", ErrSnapshotFormat, rr.n)
		}
		if err != nil {
			return nil, err
		}
		if t == recEnd {
			end := &fsmpb.SnapshotEnd{}
			if err := proto.Unmarshal(payload, end); err != nil {
				return nil, fmt.Errorf("snapshot end record: %w", err)
			}
			if end.GetRecords() != rr.n-1 {
				return nil, fmt.Errorf("%w: the end record counts %d records before it; there were %d", ErrSnapshotFormat, end.GetRecords(), rr.n-1)
			}
			if _, err := rr.r.ReadByte(); !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: bytes after the end record", ErrSnapshotFormat)
			}
			return st, nil
		}
		if err := st.readRecord(t, payload); err != nil {
			return nil, fmt.Errorf("snapshot record %d: %w", rr.n, err)
		}
	}
}

// readRecord adds one record of a format 2 snapshot to the state.
func (st *State) readRecord(t record, payload []byte) error {
	unmarshal := func(m proto.Message) error {
		if err := proto.Unmarshal(payload, m); err != nil {
			return fmt.Errorf("type %d: %w", t, err)
		}
		return nil
	}
	switch t {
	case recHeader:
		return errors.New("a second header")
	case recRules:
		rs := &allotpb.RuleSet{}
		if err := unmarshal(rs); err != nil {
			return err
		}
		set, err := rulespb.SetFromProto(rs)
		if err != nil {
			return fmt.Errorf("rules: %w", err)
		}
		st.setRules(set)
	case recMember:
		m := &allotpb.Member{}
		if err := unmarshal(m); err != nil {
			return err
		}
		st.putMember(m)
	case recIncarnation:
		m := &fsmpb.IncarnationRecord{}
		if err := unmarshal(m); err != nil {
			return err
		}
		st.restoreRun(m)
	case recLedger:
		m := &fsmpb.LedgerRecord{}
		if err := unmarshal(m); err != nil {
			return err
		}
		return st.restoreLine(m)
	case recWindow:
		m := &fsmpb.WindowRecord{}
		if err := unmarshal(m); err != nil {
			return err
		}
		return st.restoreWindow(m)
	case recFinals:
		m := &fsmpb.FinalWindows{}
		if err := unmarshal(m); err != nil {
			return err
		}
		for _, w := range m.GetWindowUnix() {
			st.setFinal(w)
		}
	case recSlots:
		m := &fsmpb.SlotsRecord{}
		if err := unmarshal(m); err != nil {
			return err
		}
		return st.restoreSlots(m)
	case recShardMap:
		m := &allotpb.ShardMap{}
		if err := unmarshal(m); err != nil {
			return err
		}
		return st.restoreShardMap(m)
	case recOverride:
		m := &allotpb.Override{}
		if err := unmarshal(m); err != nil {
			return err
		}
		if m.GetRule() == "" || m.GetTenant() == "" || m.GetVersion() > st.ov.version {
			return fmt.Errorf("override %q/%q at version %d: not one the header's version %d allows", m.GetRule(), m.GetTenant(), m.GetVersion(), st.ov.version)
		}
		st.ov.set(m)
	case recAudit:
		e := &allotpb.AuditEntry{}
		if err := unmarshal(e); err != nil {
			return err
		}
		return st.restoreAudit(e)
	case recReset:
		m := &allotpb.Reset{}
		if err := unmarshal(m); err != nil {
			return err
		}
		return st.restoreReset(m)
	case recTally:
		m := &fsmpb.TallyRecord{}
		if err := unmarshal(m); err != nil {
			return err
		}
		return st.restoreTally(m)
	case recNotice:
		m := &allotpb.Notice{}
		if err := unmarshal(m); err != nil {
			return err
		}
		return st.restoreNotice(m)
	default:
		if t&recIgnorable == 0 {
			return fmt.Errorf("%w: unknown record type %d: this version is older than the snapshot; upgrade it", ErrSnapshotFormat, t)
		}
		// A record a newer version adds, marked as one an older reader
		// may go without.
	}
	return nil
}

// noEOF turns an EOF inside a record into ErrUnexpectedEOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
