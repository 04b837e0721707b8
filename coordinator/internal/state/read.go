package state

import (
	"time"

	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// What readers see of the state, under the FSM's read lock. What these
// return is the state's own: the caller must not change it, nor keep it
// past the lock (a *Member or the *rules.Set is replaced, never changed,
// so one kept for reading stays what it was).

// Epoch is the coordinator epoch: raised by every new leader.
func (s *State) Epoch() uint64 { return s.epoch }

// Rules is the rule set.
func (s *State) Rules() *rules.Set { return s.rules }

// ClusterID names the cluster: "" until its first leader fixes it.
func (s *State) ClusterID() string { return s.clusterID }

// Settings are the cluster's settings: each 0 until a leader fixes it.
type Settings struct {
	BillingWindow, ReportInterval, LeaseTTL time.Duration
}

// Settings returns the settings fixed so far; the billing window in whole
// seconds.
func (s *State) Settings() Settings {
	var out Settings
	if s.billingWindow != 0 {
		out.BillingWindow = time.Duration(s.BillingWindowSeconds()) * time.Second
	}
	out.ReportInterval, out.LeaseTTL = time.Duration(s.reportInterval), time.Duration(s.leaseTTL)
	return out
}

// Grants are the epoch and seq of the last GrantsCommand applied.
func (s *State) Grants() (epoch, seq uint64) { return s.grantEpoch, s.grantSeq }

// Member is the member record of id, or nil.
func (s *State) Member(id string) *allotpb.Member {
	m, _ := s.members.Get(&allotpb.Member{Id: id})
	return m
}

// Members are the member records, by ID.
func (s *State) Members() []*allotpb.Member {
	var out []*allotpb.Member
	s.eachMember(func(m *allotpb.Member) { out = append(out, m) })
	return out
}

// LedgerLen is the number of ledger lines.
func (s *State) LedgerLen() int { return s.ledger.Len() }

// IncarnationLen is the number of agent runs (node incarnations) whose
// report sequence the state keeps.
func (s *State) IncarnationLen() int { return s.incarnations.Len() }

// Run is what the state keeps of one agent run: the last batch applied,
// when on the proposing leader's clock, and the newest batch's cut time
// (Unix ns).
type Run struct {
	Node                 string
	Incarnation, LastSeq uint64
	LastApplied, LastCut int64
	// Left: the run's last batch was applied (a clean shutdown).
	Left bool
}

// Runs are the agent runs, by node and incarnation.
func (s *State) Runs() []Run {
	var out []Run
	s.eachRun(func(k incKey, inc incarnation) {
		out = append(out, Run{Node: k.node, Incarnation: k.incarnation, LastSeq: inc.lastSeq, LastApplied: inc.lastApplied, LastCut: inc.lastCut, Left: inc.left})
	})
	return out
}

// LastSeq is the last batch applied for a node's incarnation, and whether
// the state knows that incarnation.
func (s *State) LastSeq(node string, incarnation uint64) (uint64, bool) {
	it, ok := s.incarnations.Get(runItem{key: incKey{node, incarnation}})
	return it.inc.lastSeq, ok
}

// line is the ledger line of an index entry, with the window's length as
// the state knows it.
func (s *State) line(it lineItem) ledger.Line {
	return ledger.Line{Key: it.key, WindowSeconds: s.BillingWindowSeconds(), Admitted: it.u.admitted, Denied: it.u.denied,
		Granted: it.u.granted, Final: s.final.Has(it.key.Window), Terms: it.u.terms, Overage: it.u.overage}
}

// Ledger calls fn for every ledger line in order (window, tenant,
// rule, region), until fn returns false.
func (s *State) Ledger(fn func(ledger.Line) bool) {
	s.ledger.Ascend(func(it lineItem) bool { return fn(s.line(it)) })
}

// LedgerPage returns up to limit lines matching q, in index order, after
// the key `after` when given; see ledgerPage.
func (s *State) LedgerPage(q LedgerQuery, after *ledger.Key, limit, budget int) (lines []ledger.Line, next ledger.Key, more bool) {
	items, next, more := s.ledgerPage(q, after, limit, budget)
	lines = make([]ledger.Line, len(items))
	for i, it := range items {
		lines[i] = s.line(it)
	}
	return lines, next, more
}

// OpenWindow is a billing window not final yet and the agent runs that
// reported usage in it, by node and incarnation.
type OpenWindow struct {
	Start     int64
	Reporters []Run // Node and Incarnation only
}

// OpenWindows are the windows not final yet, by start.
func (s *State) OpenWindows() []OpenWindow {
	var out []OpenWindow
	s.eachOpen(func(w int64, reporters []incKey) {
		ow := OpenWindow{Start: w, Reporters: make([]Run, len(reporters))}
		for i, k := range reporters {
			ow.Reporters[i] = Run{Node: k.node, Incarnation: k.incarnation}
		}
		out = append(out, ow)
	})
	return out
}

// FinalWindows are the windows that are final, in order.
func (s *State) FinalWindows() []int64 {
	return s.finalWindows()
}

// Outside a log. The in-process Engine (no Raft) and a restore (which
// keeps the cluster's own identity) change a state that is in no FSM.

// SetRules replaces the rule set.
func (s *State) SetRules(set *rules.Set) { s.setRules(set) }

// SetClusterID replaces the cluster ID.
func (s *State) SetClusterID(id string) { s.clusterID = id }
