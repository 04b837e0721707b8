package state

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"github.com/google/btree"
	"google.golang.org/protobuf/proto"
)

// The audit log records who changed the rules, the overrides and the
// membership, when, and what it was before and after. A command that
// changes them carries an fsmpb.Audit from its proposer (the caller's
// credential, the leader's clock); the state adds what changed as it
// applies the command, and only if it applies, so that a change and its
// record are one log entry. It keeps the newest entries (a bound each
// record carries, and an age maintenance applies) in every snapshot.

// The kinds of audit entry.
const (
	AuditRules      = "rules"
	AuditOverrides  = "overrides"
	AuditMembership = "membership"
	AuditReset      = "reset"
)

// AuditKinds lists every kind, for validating a filter.
var AuditKinds = []string{AuditRules, AuditOverrides, AuditMembership, AuditReset}

// DefaultAuditMaxEntries is how many entries are kept when the proposer
// names no bound.
const DefaultAuditMaxEntries = 100_000

// MaxAuditItems bounds the subjects and the items of before and after one
// entry lists: an import of ten thousand overrides is one entry of a few
// tens of KB, its count saying how many changed.
const MaxAuditItems = 50

type auditStore struct {
	// entries by seq; an entry is never changed once in the tree.
	entries *btree.BTreeG[*allotpb.AuditEntry]
	seq     uint64 // the last seq given, kept or not
}

func newAuditStore() auditStore {
	return auditStore{entries: btree.NewG(degree, func(a, b *allotpb.AuditEntry) bool { return a.GetSeq() < b.GetSeq() })}
}

func (a *auditStore) clone() auditStore {
	c := *a
	c.entries = a.entries.Clone()
	return c
}

// keep drops the oldest entries beyond max (0: the default).
func (a *auditStore) keep(max uint64) {
	if max == 0 {
		max = DefaultAuditMaxEntries
	}
	for uint64(a.entries.Len()) > max {
		a.entries.DeleteMin()
	}
}

// auditChange is what a command changed, for its entry.
type auditChange struct {
	kind          string
	subjects      []string
	changed       int
	before, after *allotpb.AuditValues
}

// record appends the entry of a change under a's stamp; nothing without
// a stamp (a command from before the audit log, or one the proposer does
// not record: a mirror, maintenance).
func (s *State) record(a *fsmpb.Audit, ch auditChange) {
	if a == nil {
		return
	}
	s.audit.seq++
	e := &allotpb.AuditEntry{
		Seq: s.audit.seq, UnixNano: a.GetAtUnixNano(), Actor: a.GetActor(), Peer: a.GetPeer(),
		Kind: ch.kind, Action: a.GetAction(), Changed: uint32(ch.changed),
		Before: ch.before, After: ch.after,
	}
	e.Subjects = ch.subjects
	if len(e.Subjects) > MaxAuditItems {
		e.Subjects, e.Truncated = e.Subjects[:MaxAuditItems], true
	}
	if ch.changed > MaxAuditItems {
		e.Truncated = true
	}
	s.audit.entries.ReplaceOrInsert(e)
	s.audit.keep(a.GetMaxEntries())
	s.recorded = ch.kind
}

// Recorded is the kind of the audit entry the last command applied
// recorded, or "": for the metric of entries recorded. It is not part of
// the replicated state.
func (s *State) Recorded() string { return s.recorded }

// applyAudit records a change no other command carries.
func (s *State) applyAudit(cmd *fsmpb.AuditCommand) {
	subjects := slices.Clone(cmd.GetSubjects())
	s.record(cmd.GetAudit(), auditChange{kind: cmd.GetKind(), subjects: subjects, changed: len(subjects), before: cmd.GetBefore(), after: cmd.GetAfter()})
}

// expireAudit drops the entries older than cutoff (Unix ns) and those
// beyond max.
func (s *State) expireAudit(cutoff int64, max uint64) {
	for {
		e, ok := s.audit.entries.Min()
		if !ok || e.GetUnixNano() >= cutoff {
			break
		}
		s.audit.entries.DeleteMin()
	}
	s.audit.keep(max)
}

// rulesChange is what a rules command changed: the rules whose wire
// form differs between the sets, before and after, by name; its subjects
// are those and the names the command put or deleted.
func rulesChange(old, cur *rules.Set, cmd *fsmpb.RulesCommand) auditChange {
	names := map[string]bool{}
	for _, r := range old.Rules() {
		names[r.Name] = true
	}
	for _, r := range cur.Rules() {
		names[r.Name] = true
	}
	wire := func(set *rules.Set, name string) *allotpb.Rule {
		if r, ok := set.Get(name); ok {
			return rulespb.ToProto(&r)
		}
		return nil
	}
	touched := map[string]bool{}
	for _, n := range cmd.GetDelete() {
		touched[n] = true
	}
	for _, r := range cmd.GetPut() {
		touched[r.GetName()] = true
	}
	ch := auditChange{kind: AuditRules, before: &allotpb.AuditValues{}, after: &allotpb.AuditValues{}}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		was, is := wire(old, n), wire(cur, n)
		if proto.Equal(was, is) {
			continue
		}
		touched[n] = true
		if ch.changed++; ch.changed > MaxAuditItems {
			continue
		}
		if was != nil {
			ch.before.Rules = append(ch.before.Rules, was)
		}
		if is != nil {
			ch.after.Rules = append(ch.after.Rules, is)
		}
	}
	ch.subjects = slices.Sorted(maps.Keys(touched))
	return ch
}

// AuditQuery filters the audit log; a zero field matches all.
type AuditQuery struct {
	// From and To bound the entries' time, Unix ns: From ≤ t < To; To 0
	// is unbounded.
	From, To int64
	Actor    string
	Kind     string
	// Subject matches one of an entry's subjects exactly or, for a
	// rule/tenant subject (an override's, a reset's), its tenant.
	Subject string
}

func (q AuditQuery) matches(e *allotpb.AuditEntry) bool {
	switch {
	case e.GetUnixNano() < q.From, q.To != 0 && e.GetUnixNano() >= q.To:
		return false
	case q.Actor != "" && e.GetActor() != q.Actor, q.Kind != "" && e.GetKind() != q.Kind:
		return false
	case q.Subject == "":
		return true
	}
	for _, sub := range e.GetSubjects() {
		if sub == q.Subject {
			return true
		}
		if _, tenant, ok := strings.Cut(sub, "/"); ok && tenant == q.Subject {
			return true
		}
	}
	return false
}

// AuditPage returns up to size entries matching q, newest first, older
// than seq before (0: from the newest), looking at no more than maxScan
// entries; more says there may be others, older than next.
func (s *State) AuditPage(q AuditQuery, before uint64, size, maxScan int) (out []*allotpb.AuditEntry, next uint64, more bool) {
	scanned := 0
	visit := func(e *allotpb.AuditEntry) bool {
		if len(out) == size || scanned == maxScan {
			more = true
			return false
		}
		scanned++
		next = e.GetSeq()
		if q.matches(e) {
			out = append(out, e)
		}
		return true
	}
	if before == 0 {
		s.audit.entries.Descend(visit)
	} else {
		s.audit.entries.DescendLessOrEqual(&allotpb.AuditEntry{Seq: before - 1}, visit)
	}
	return out, next, more
}

// AuditBounds are the oldest and newest entries' seqs kept (0, 0 when
// none is).
func (s *State) AuditBounds() (oldest, newest uint64) {
	lo, ok := s.audit.entries.Min()
	if !ok {
		return 0, 0
	}
	hi, _ := s.audit.entries.Max()
	return lo.GetSeq(), hi.GetSeq()
}

// AuditLen is how many entries are kept.
func (s *State) AuditLen() int { return s.audit.entries.Len() }

// eachAudit calls fn for every entry, by seq: the snapshot's order.
func (s *State) eachAudit(fn func(*allotpb.AuditEntry)) {
	s.audit.entries.Ascend(func(e *allotpb.AuditEntry) bool { fn(e); return true })
}

// restoreAudit adds a snapshot's entry.
func (s *State) restoreAudit(e *allotpb.AuditEntry) error {
	if e.GetSeq() == 0 || e.GetSeq() > s.audit.seq {
		return errAuditSeq(e.GetSeq(), s.audit.seq)
	}
	if _, dup := s.audit.entries.ReplaceOrInsert(e); dup {
		return errAuditSeq(e.GetSeq(), s.audit.seq)
	}
	return nil
}

func errAuditSeq(seq, last uint64) error {
	return fmt.Errorf("audit entry %d: not one the header's last seq %d allows, or a second one", seq, last)
}
