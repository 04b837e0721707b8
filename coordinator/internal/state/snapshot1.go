package state

import (
	"bufio"
	"fmt"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
)

// Format 1, positional: a length-delimited header whose counts say how
// many records of each section follow, then the sections in a fixed
// order. Versions before format 2 wrote it; backups they took are read
// here. Format 1 grew compatibly: the header's report interval and lease
// TTL (fields 9 and 10) are absent from older snapshots, which restore
// with those settings not fixed, for the next leader to fix.

// readFormat1 builds a state from a format 1 snapshot.
func readFormat1(r *bufio.Reader) (*State, error) {
	read := func(m proto.Message) error { return noEOF(readDelimited(r, m)) }
	h := &fsmpb.SnapshotHeader{}
	if err := read(h); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if h.GetFormat() != 1 {
		return nil, fmt.Errorf("%w: snapshot format %d, this version reads 1 and %d", ErrSnapshotFormat, h.GetFormat(), snapshotFormat)
	}
	st := New()
	st.setHeader(h)
	rs := &allotpb.RuleSet{}
	if err := read(rs); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	set, err := rulespb.SetFromProto(rs)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	st.setRules(set)
	for i := uint64(0); i < h.GetMembers(); i++ {
		m := &allotpb.Member{}
		if err := read(m); err != nil {
			return nil, fmt.Errorf("member %d: %w", i, err)
		}
		st.putMember(m)
	}
	for i := uint64(0); i < h.GetIncarnations(); i++ {
		m := &fsmpb.IncarnationRecord{}
		if err := read(m); err != nil {
			return nil, fmt.Errorf("incarnation %d: %w", i, err)
		}
		st.restoreRun(m)
	}
	for i := uint64(0); i < h.GetLedgerRecords(); i++ {
		m := &fsmpb.LedgerRecord{}
		if err := read(m); err != nil {
			return nil, fmt.Errorf("ledger record %d: %w", i, err)
		}
		if err := st.restoreLine(m); err != nil {
			return nil, fmt.Errorf("ledger record %d: %w", i, err)
		}
	}
	for i := uint64(0); i < h.GetWindows(); i++ {
		m := &fsmpb.WindowRecord{}
		if err := read(m); err != nil {
			return nil, fmt.Errorf("window %d: %w", i, err)
		}
		if err := st.restoreWindow(m); err != nil {
			return nil, err
		}
	}
	finals := &fsmpb.FinalWindows{}
	if err := read(finals); err != nil {
		return nil, fmt.Errorf("final windows: %w", err)
	}
	for _, w := range finals.GetWindowUnix() {
		st.setFinal(w)
	}
	return st, nil
}

// readDelimited reads one length-delimited message.
func readDelimited(r *bufio.Reader, m proto.Message) error {
	return protodelim.UnmarshalOptions{MaxSize: maxRecord}.UnmarshalFrom(r, m)
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
