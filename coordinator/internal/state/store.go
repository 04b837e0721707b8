package state

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/google/btree"
)

// How the state's collections are stored: each a B-tree of values from
// github.com/google/btree, whose Clone is lazy copy-on-write. A snapshot
// clones every tree in O(1) under the FSM's lock; afterwards a write to
// the state copies the nodes on its path before changing them, and the
// clone, walked by Persist without the lock, keeps seeing the nodes as
// they were. An item is a value, or points only to what is never changed
// (a *Member is replaced, a granted sum is a new *float64), so the two
// trees share nothing that changes.

// degree is the B-trees' degree: nodes hold up to 63 items.
const degree = 32

// runItem is one agent run's record, by node and incarnation.
type runItem struct {
	key incKey
	inc incarnation
}

// lineItem is one ledger line, by window, tenant, rule and region.
type lineItem struct {
	key ledger.Key
	u   usage
}

// openItem is, with marker set, an open window; without, one incarnation
// that reported usage in it. A window's marker sorts before its
// reporters.
type openItem struct {
	window   int64
	marker   bool
	reporter incKey
}

func newMembers() *btree.BTreeG[*allotpb.Member] {
	return btree.NewG(degree, func(a, b *allotpb.Member) bool { return a.GetId() < b.GetId() })
}

func newRuns() *btree.BTreeG[runItem] {
	return btree.NewG(degree, func(a, b runItem) bool { return compareIncKeys(a.key, b.key) < 0 })
}

func newLedger() *btree.BTreeG[lineItem] {
	return btree.NewG(degree, func(a, b lineItem) bool { return ledger.CompareKeys(a.key, b.key) < 0 })
}

func newOpen() *btree.BTreeG[openItem] {
	return btree.NewG(degree, func(a, b openItem) bool {
		if a.window != b.window {
			return a.window < b.window
		}
		if a.marker != b.marker {
			return a.marker
		}
		return compareIncKeys(a.reporter, b.reporter) < 0
	})
}

func newFinal() *btree.BTreeG[int64] { return btree.NewOrderedG[int64](degree) }

func compareIncKeys(a, b incKey) int {
	return cmp.Or(strings.Compare(a.node, b.node), cmp.Compare(a.incarnation, b.incarnation))
}

// insertIfAbsent inserts it unless the tree has it: a replace would copy
// the nodes on its path (shared with a snapshot's clone) for nothing.
func insertIfAbsent[T any](t *btree.BTreeG[T], it T) {
	if !t.Has(it) {
		t.ReplaceOrInsert(it)
	}
}

// openWindow marks window open (it may have no reporters yet).
func (s *State) openWindow(window int64) {
	insertIfAbsent(s.open, openItem{window: window, marker: true})
}

// closeWindow forgets an open window and its reporters.
func (s *State) closeWindow(window int64) {
	var drop []openItem
	s.open.AscendGreaterOrEqual(openItem{window: window, marker: true}, func(it openItem) bool {
		if it.window != window {
			return false
		}
		drop = append(drop, it)
		return true
	})
	for _, it := range drop {
		s.open.Delete(it)
	}
}

// frozen is a copy of the state that Write can walk while s changes: O(1),
// and it must run under the FSM's write lock (a clone changes the trees'
// copy-on-write marks, which a concurrent clone would race with).
func (s *State) frozen() *State {
	c := *s
	c.members = s.members.Clone()
	c.incarnations = s.incarnations.Clone()
	c.ledger = s.ledger.Clone()
	c.open = s.open.Clone()
	c.final = s.final.Clone()
	c.ov = s.ov.clone()
	c.audit = s.audit.clone()
	c.notices = s.notices.clone()
	// c.resets shares s's list: appended to and cut from the front only.
	return &c
}

// eachMember calls fn for each member record, by ID.
func (s *State) eachMember(fn func(*allotpb.Member)) {
	s.members.Ascend(func(m *allotpb.Member) bool { fn(m); return true })
}

// eachRun calls fn for each agent run, by node and incarnation.
func (s *State) eachRun(fn func(incKey, incarnation)) {
	s.incarnations.Ascend(func(it runItem) bool { fn(it.key, it.inc); return true })
}

// eachLine calls fn for each ledger line, in the ledger's order.
func (s *State) eachLine(fn func(ledger.Key, usage)) {
	s.ledger.Ascend(func(it lineItem) bool { fn(it.key, it.u); return true })
}

// eachOpen calls fn for each open window, by start, with its reporters by
// node and incarnation.
func (s *State) eachOpen(fn func(window int64, reporters []incKey)) {
	var (
		cur       int64
		reporters []incKey
		have      bool
	)
	s.open.Ascend(func(it openItem) bool {
		if it.marker {
			if have {
				fn(cur, reporters)
			}
			cur, reporters, have = it.window, nil, true
			return true
		}
		reporters = append(reporters, it.reporter)
		return true
	})
	if have {
		fn(cur, reporters)
	}
}

// finalWindows are the final windows, in order.
func (s *State) finalWindows() []int64 {
	out := make([]int64, 0, s.final.Len())
	s.final.Ascend(func(w int64) bool { out = append(out, w); return true })
	return out
}

// setHeader takes a snapshot header's scalars.
func (s *State) setHeader(h *fsmpb.SnapshotHeader) {
	s.epoch, s.billingWindow = h.GetEpoch(), h.GetBillingWindowNano()
	s.reportInterval, s.leaseTTL = h.GetReportIntervalNano(), h.GetLeaseTtlNano()
	s.grantEpoch, s.grantSeq = h.GetGrantEpoch(), h.GetGrantSeq()
	s.clusterID = h.GetClusterId()
	s.export = PositionFromProto(h.GetExport())
	s.retentionDropped = h.GetRetentionDroppedLines()
	s.ov.version, s.ov.floor, s.ov.mirror = h.GetOverridesVersion(), h.GetOverridesFloor(), h.GetOverridesMirror()
	s.audit.seq = h.GetAuditSeq()
	s.resets.version, s.resets.floor, s.resets.mirror = h.GetResetsVersion(), h.GetResetsFloor(), h.GetResetsMirror()
}

func (s *State) putMember(m *allotpb.Member) { s.members.ReplaceOrInsert(m) }

func (s *State) restoreRun(m *fsmpb.IncarnationRecord) {
	s.incarnations.ReplaceOrInsert(runItem{key: incKey{m.GetNode(), m.GetIncarnation()}, inc: incarnation{
		lastSeq: m.GetLastSeq(), lastApplied: m.GetLastAppliedUnixNano(), lastCut: m.GetLastCutUnixNano(),
		left: m.GetLeft(),
	}})
}

// restoreLine adds a snapshot's ledger line; a second line for the same
// key is an error.
func (s *State) restoreLine(m *fsmpb.LedgerRecord) error {
	k := ledger.Key{Window: m.GetWindowUnix(), Tenant: m.GetTenant(), Rule: m.GetRule(), Region: m.GetRegion()}
	u := usage{admitted: m.GetAdmitted(), denied: m.GetDenied(), granted: m.Granted,
		terms: ledger.Terms{CycleStart: m.GetCycleStartUnix(), Limit: m.GetLimit()}, overage: m.GetOverage()}
	if _, dup := s.ledger.ReplaceOrInsert(lineItem{key: k, u: u}); dup {
		return fmt.Errorf("a second line for %s/%s/%s/%d", k.Tenant, k.Rule, k.Region, k.Window)
	}
	if m.GetFinal() { // format 1 marks each line of a final window
		s.setFinal(m.GetWindowUnix())
	}
	return nil
}

// restoreWindow adds a snapshot's open window and its reporters.
func (s *State) restoreWindow(m *fsmpb.WindowRecord) error {
	s.openWindow(m.GetWindowUnix())
	for _, r := range m.GetReporters() {
		k, err := decodeIncKey(r)
		if err != nil {
			return fmt.Errorf("window %d: %w", m.GetWindowUnix(), err)
		}
		s.open.ReplaceOrInsert(openItem{window: m.GetWindowUnix(), reporter: k})
	}
	return nil
}

func (s *State) setFinal(w int64) { s.final.ReplaceOrInsert(w) }
