package state

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
)

// How the state's collections are stored, walked in their order (for
// snapshots and readers) and filled from a snapshot.

// frozen is a copy of the state that Write can walk while s changes.
func (s *State) frozen() *State {
	c := *s
	c.members = make(map[string]*allotpb.Member, len(s.members))
	for id, m := range s.members {
		c.members[id] = m // replaced on change, never changed
	}
	c.incarnations = make(map[incKey]*incarnation, len(s.incarnations))
	for k, inc := range s.incarnations {
		v := *inc
		c.incarnations[k] = &v
	}
	c.ledger = make(map[LedgerKey]*usage, len(s.ledger))
	for k, u := range s.ledger {
		v := *u
		c.ledger[k] = &v
	}
	c.index = s.index.Clone()
	c.open = make(map[int64]map[incKey]struct{}, len(s.open))
	for w, r := range s.open {
		c.open[w] = maps.Clone(r)
	}
	c.final = make(map[int64]bool, len(s.final))
	for w := range s.final {
		c.final[w] = true
	}
	return &c
}

// eachMember calls fn for each member record, by ID.
func (s *State) eachMember(fn func(*allotpb.Member)) {
	ids := make([]string, 0, len(s.members))
	for id := range s.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		fn(s.members[id])
	}
}

// eachRun calls fn for each agent run, by node and incarnation.
func (s *State) eachRun(fn func(incKey, incarnation)) {
	keys := make([]incKey, 0, len(s.incarnations))
	for k := range s.incarnations {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareIncKeys)
	for _, k := range keys {
		fn(k, *s.incarnations[k])
	}
}

// eachLine calls fn for each ledger line, in the index's order.
func (s *State) eachLine(fn func(LedgerKey, usage)) {
	s.index.Ascend(func(k LedgerKey) bool { fn(k, *s.ledger[k]); return true })
}

// eachOpen calls fn for each open window, by start, with its reporters by
// node and incarnation.
func (s *State) eachOpen(fn func(window int64, reporters []incKey)) {
	windows := make([]int64, 0, len(s.open))
	for w := range s.open {
		windows = append(windows, w)
	}
	slices.Sort(windows)
	for _, w := range windows {
		keys := make([]incKey, 0, len(s.open[w]))
		for k := range s.open[w] {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareIncKeys)
		fn(w, keys)
	}
}

// finalWindows are the final windows, in order.
func (s *State) finalWindows() []int64 {
	out := make([]int64, 0, len(s.final))
	for w := range s.final {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// setHeader takes a snapshot header's scalars.
func (s *State) setHeader(h *fsmpb.SnapshotHeader) {
	s.epoch, s.billingWindow = h.GetEpoch(), h.GetBillingWindowNano()
	s.reportInterval, s.leaseTTL = h.GetReportIntervalNano(), h.GetLeaseTtlNano()
	s.grantEpoch, s.grantSeq = h.GetGrantEpoch(), h.GetGrantSeq()
	s.clusterID = h.GetClusterId()
}

func (s *State) putMember(m *allotpb.Member) { s.members[m.GetId()] = m }

func (s *State) restoreRun(m *fsmpb.IncarnationRecord) {
	s.incarnations[incKey{m.GetNode(), m.GetIncarnation()}] = &incarnation{
		lastSeq: m.GetLastSeq(), lastApplied: m.GetLastAppliedUnixNano(), lastCut: m.GetLastCutUnixNano(),
	}
}

// restoreLine adds a snapshot's ledger line; a second line for the same
// key is an error.
func (s *State) restoreLine(m *fsmpb.LedgerRecord) error {
	k := LedgerKey{m.GetTenant(), m.GetRule(), m.GetRegion(), m.GetWindowUnix()}
	if _, dup := s.ledger[k]; dup {
		return fmt.Errorf("a second line for %s/%s/%s/%d", k.Tenant, k.Rule, k.Region, k.Window)
	}
	s.putLedger(k, &usage{admitted: m.GetAdmitted(), denied: m.GetDenied(), granted: m.Granted})
	if m.GetFinal() { // format 1 marks each line of a final window
		s.setFinal(m.GetWindowUnix())
	}
	return nil
}

func (s *State) restoreWindow(m *fsmpb.WindowRecord) error {
	reporters := map[incKey]struct{}{}
	for _, r := range m.GetReporters() {
		k, err := decodeIncKey(r)
		if err != nil {
			return fmt.Errorf("window %d: %w", m.GetWindowUnix(), err)
		}
		reporters[k] = struct{}{}
	}
	s.open[m.GetWindowUnix()] = reporters
	return nil
}

func (s *State) setFinal(w int64) { s.final[w] = true }

func compareIncKeys(a, b incKey) int {
	return cmp.Or(strings.Compare(a.node, b.node), cmp.Compare(a.incarnation, b.incarnation))
}
