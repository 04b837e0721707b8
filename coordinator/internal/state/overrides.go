package state

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"github.com/google/btree"
)

// Overrides are per-tenant changes of a rule's limit or weight, set
// through the overrides API. They are kept apart from the rule set so
// that a change is one small log entry, and followed by version: every
// command that changes them takes the next version and stamps the entries
// it changed with it, and a follower (an agent, a shard group mirroring
// the home group) asks for what changed since the version it holds.
//
// A deleted or expired override stays as a tombstone, so that followers
// learn of the deletion; at most maxTombstones are kept, the oldest
// dropped first, and the floor is the newest version dropped: a follower
// below it is sent every override afresh (OverridesDelta.full).

// maxTombstones bounds the deleted overrides kept for followers.
const maxTombstones = 100_000

// MaxOverridesPerCommand bounds the overrides one command puts or
// deletes: one log entry, one page of changes (a page ends only between
// versions).
const MaxOverridesPerCommand = 10_000

// ErrOverrideNotFound is returned for a delete of an override that does
// not exist.
var ErrOverrideNotFound = errors.New("no such override")

type overrideKey struct{ rule, tenant string }

func compareOverrideKeys(a, b overrideKey) int {
	return cmp.Or(strings.Compare(a.rule, b.rule), strings.Compare(a.tenant, b.tenant))
}

// overrideItem is one override, or its tombstone; o is never changed once
// in the tree (a change is a new message).
type overrideItem struct {
	key overrideKey
	o   *allotpb.Override
}

// versionItem orders the overrides by the version they last changed at.
type versionItem struct {
	version uint64
	key     overrideKey
}

// expiryItem orders the overrides that expire by when.
type expiryItem struct {
	at  int64
	key overrideKey
}

type overrideStore struct {
	byKey     *btree.BTreeG[overrideItem]
	byVersion *btree.BTreeG[versionItem]
	expiring  *btree.BTreeG[expiryItem]
	version   uint64
	floor     uint64
	mirror    bool // following the home group's overrides (a shard group)
	live      int
	dead      int
}

func newOverrideStore() overrideStore {
	return overrideStore{
		byKey: btree.NewG(degree, func(a, b overrideItem) bool { return compareOverrideKeys(a.key, b.key) < 0 }),
		byVersion: btree.NewG(degree, func(a, b versionItem) bool {
			return a.version < b.version || a.version == b.version && compareOverrideKeys(a.key, b.key) < 0
		}),
		expiring: btree.NewG(degree, func(a, b expiryItem) bool {
			return a.at < b.at || a.at == b.at && compareOverrideKeys(a.key, b.key) < 0
		}),
	}
}

func (o *overrideStore) clone() overrideStore {
	c := *o
	c.byKey, c.byVersion, c.expiring = o.byKey.Clone(), o.byVersion.Clone(), o.expiring.Clone()
	return c
}

// set puts an entry (an override or a tombstone), replacing the one of
// its key and keeping the indexes and counts.
func (o *overrideStore) set(e *allotpb.Override) {
	k := overrideKey{e.GetRule(), e.GetTenant()}
	if old, ok := o.byKey.Get(overrideItem{key: k}); ok {
		o.unindex(old)
	}
	o.byKey.ReplaceOrInsert(overrideItem{key: k, o: e})
	o.byVersion.ReplaceOrInsert(versionItem{e.GetVersion(), k})
	if e.GetDeleted() {
		o.dead++
	} else {
		o.live++
		if at := e.GetExpiresUnixNano(); at != 0 {
			o.expiring.ReplaceOrInsert(expiryItem{at, k})
		}
	}
}

func (o *overrideStore) unindex(it overrideItem) {
	o.byVersion.Delete(versionItem{it.o.GetVersion(), it.key})
	if it.o.GetDeleted() {
		o.dead--
		return
	}
	o.live--
	if at := it.o.GetExpiresUnixNano(); at != 0 {
		o.expiring.Delete(expiryItem{at, it.key})
	}
}

// kill turns a live override into a tombstone at version v.
func (o *overrideStore) kill(k overrideKey, v uint64, now int64) bool {
	it, ok := o.byKey.Get(overrideItem{key: k})
	if !ok || it.o.GetDeleted() {
		return false
	}
	o.set(&allotpb.Override{Rule: k.rule, Tenant: k.tenant, Version: v, Deleted: true, UpdatedUnixNano: now})
	return true
}

// prune drops the oldest tombstones beyond maxTombstones, raising the
// floor.
func (o *overrideStore) prune() {
	if o.dead <= maxTombstones {
		return
	}
	var drop []overrideItem
	o.byVersion.Ascend(func(v versionItem) bool {
		it, _ := o.byKey.Get(overrideItem{key: v.key})
		if it.o.GetDeleted() {
			drop = append(drop, it)
		}
		return o.dead-len(drop) > maxTombstones
	})
	for _, it := range drop {
		o.unindex(it)
		o.byKey.Delete(it)
		o.floor = max(o.floor, it.o.GetVersion())
	}
}

// OverridesVersion is the overrides' version: 0 until one is set.
func (s *State) OverridesVersion() uint64 { return s.ov.version }

// OverridesCount is how many overrides are in force (tombstones aside).
func (s *State) OverridesCount() int { return s.ov.live }

// Override returns the override of tenant under rule, if one is in force.
func (s *State) Override(rule, tenant string) (*allotpb.Override, bool) {
	it, ok := s.ov.byKey.Get(overrideItem{key: overrideKey{rule, tenant}})
	if !ok || it.o.GetDeleted() {
		return nil, false
	}
	return it.o, true
}

// ListOverrides calls fn for each override in force, by rule and tenant,
// starting after (rule, tenant) after, restricted to rule (when set) and
// to tenants with prefix, until fn returns false.
func (s *State) ListOverrides(rule, prefix string, after [2]string, fn func(*allotpb.Override) bool) {
	start := overrideKey{rule, prefix}
	if after[0] != "" || after[1] != "" {
		start = overrideKey{after[0], after[1] + "\x00"}
	}
	s.ov.byKey.AscendGreaterOrEqual(overrideItem{key: start}, func(it overrideItem) bool {
		if rule != "" && it.key.rule != rule {
			return false
		}
		if !strings.HasPrefix(it.key.tenant, prefix) {
			return rule == "" || it.key.tenant < prefix
		}
		if it.o.GetDeleted() {
			return true
		}
		return fn(it.o)
	})
}

// OverridesSince returns what changed after version since, at most about
// limit entries (a page ends between versions), or nil when nothing did.
// It is full (every override in force, tombstones left out) when since
// is below the floor, or ahead of this state (another cluster's version);
// a mirror ahead of which since is has not yet taken in what the home
// group told the caller, and answers nil.
func (s *State) OverridesSince(since uint64, limit int) *allotpb.OverridesDelta {
	if since == s.ov.version || since > s.ov.version && s.ov.mirror {
		return nil
	}
	d := &allotpb.OverridesDelta{Version: s.ov.version}
	from := since + 1
	if since < s.ov.floor || since > s.ov.version {
		d.Full, from = true, 0
	}
	var last uint64
	s.ov.byVersion.AscendGreaterOrEqual(versionItem{version: from}, func(v versionItem) bool {
		if len(d.Overrides) >= limit && v.version != last {
			d.More, d.Version = true, last
			return false
		}
		it, _ := s.ov.byKey.Get(overrideItem{key: v.key})
		last = v.version
		if d.Full && it.o.GetDeleted() {
			return true
		}
		d.Overrides = append(d.Overrides, it.o)
		return true
	})
	return d
}

// CheckOverrides returns the error applying cmd would refuse it with,
// without applying it: proposers validate before proposing.
func (s *State) CheckOverrides(cmd *fsmpb.OverridesCommand) error {
	if cmd.GetMirror() {
		return nil
	}
	var errs rules.Errors
	if n := len(cmd.GetPut()) + len(cmd.GetDelete()); n > MaxOverridesPerCommand {
		return rules.Errors{&rules.Error{Field: "overrides", Msg: fmt.Sprintf("%d in one call; at most %d (the CLI's import sends batches)", n, MaxOverridesPerCommand)}}
	}
	now := time.Unix(0, cmd.GetNowUnixNano())
	seen := map[overrideKey]int{}
	added := 0
	for i, p := range cmd.GetPut() {
		o := rulespb.OverrideFromProto(p)
		for _, e := range s.rules.CheckOverride(&o, now) {
			e.Field = fmt.Sprintf("overrides[%d].%s", i, e.Field)
			errs = append(errs, e)
		}
		k := overrideKey{o.Rule, o.Tenant}
		if j, dup := seen[k]; dup {
			errs = append(errs, &rules.Error{Rule: o.Rule, Field: fmt.Sprintf("overrides[%d]", i), Msg: fmt.Sprintf("tenant %q is also overridden by overrides[%d] of this call", o.Tenant, j)})
		}
		seen[k] = i
		if _, ok := s.Override(o.Rule, o.Tenant); !ok {
			added++
		}
	}
	for i, k := range cmd.GetDelete() {
		if _, ok := s.Override(k.GetRule(), k.GetTenant()); !ok {
			return fmt.Errorf("delete[%d]: %w: tenant %q has none under rule %q", i, ErrOverrideNotFound, k.GetTenant(), k.GetRule())
		}
	}
	if s.ov.live+added > rules.MaxOverrides {
		errs = append(errs, &rules.Error{Field: "overrides", Msg: fmt.Sprintf("the cluster would hold %d overrides; at most %d", s.ov.live+added, rules.MaxOverrides)})
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// ChangedOverrides returns the overrides of put that differ from the
// one in force for their rule and tenant (limit, weight, cycle or expiry), or
// that have none: the others would change nothing. The leader proposes
// only these, so that putting back what 'overrides list' printed takes no
// new version and leaves every tenant's keys on the agents as they are.
func (s *State) ChangedOverrides(put []*allotpb.Override) []*allotpb.Override {
	var out []*allotpb.Override
	for _, p := range put {
		o, ok := s.Override(p.GetRule(), p.GetTenant())
		if ok && o.GetLimit() == p.GetLimit() && o.GetWeight() == p.GetWeight() && o.GetExpiresUnixNano() == p.GetExpiresUnixNano() &&
			o.GetCycle().GetAnchorDay() == p.GetCycle().GetAnchorDay() && o.GetCycle().GetTimeZone() == p.GetCycle().GetTimeZone() {
			continue
		}
		out = append(out, p)
	}
	return out
}

// applyOverrides applies cmd, all or none, and returns the new version or
// the error that refused it.
func (s *State) applyOverrides(cmd *fsmpb.OverridesCommand) any {
	if cmd.GetMirror() {
		s.mirrorOverrides(cmd)
		return s.ov.version
	}
	if err := s.CheckOverrides(cmd); err != nil {
		return err
	}
	v, now := s.ov.version+1, cmd.GetNowUnixNano()
	var ch *auditChange
	if cmd.GetAudit() != nil {
		ch = &auditChange{kind: AuditOverrides, changed: len(cmd.GetPut()) + len(cmd.GetDelete()), before: &allotpb.AuditValues{}, after: &allotpb.AuditValues{}}
	}
	// note lists a key and what it held, before it changes.
	note := func(rule, tenant string) {
		if ch == nil || len(ch.subjects) == MaxAuditItems {
			return
		}
		ch.subjects = append(ch.subjects, rule+"/"+tenant)
		if was, ok := s.Override(rule, tenant); ok {
			ch.before.Overrides = append(ch.before.Overrides, was)
		}
	}
	for _, p := range cmd.GetPut() {
		note(p.GetRule(), p.GetTenant())
		o := &allotpb.Override{
			Rule: p.GetRule(), Tenant: p.GetTenant(), Limit: p.GetLimit(), Weight: p.GetWeight(), Cycle: p.GetCycle(),
			ExpiresUnixNano: p.GetExpiresUnixNano(), Version: v, UpdatedUnixNano: now,
		}
		s.ov.set(o)
		if ch != nil && len(ch.after.Overrides) < MaxAuditItems {
			ch.after.Overrides = append(ch.after.Overrides, o)
		}
	}
	for _, k := range cmd.GetDelete() {
		note(k.GetRule(), k.GetTenant())
		s.ov.kill(overrideKey{k.GetRule(), k.GetTenant()}, v, now)
	}
	s.ov.version = v
	s.ov.prune()
	if ch != nil {
		s.record(cmd.GetAudit(), *ch)
	}
	return v
}

// mirrorOverrides takes a page of the home group's changes as they are,
// versions included, so that every group of a region numbers the same
// overrides alike and an agent following several groups holds one
// version. A full page drops every override first. A mirror expires
// nothing itself: the home group's expiries arrive as tombstones.
func (s *State) mirrorOverrides(cmd *fsmpb.OverridesCommand) {
	if cmd.GetFull() {
		s.ov = newOverrideStore()
		s.ov.floor = cmd.GetMirrorVersion()
	}
	s.ov.mirror = true
	for _, p := range cmd.GetPut() {
		s.ov.set(p)
	}
	s.ov.version = max(s.ov.version, cmd.GetMirrorVersion())
	s.ov.prune()
}

// MirroredOverridesVersion is the home group's overrides version this
// group has taken in: its own version, as a mirror numbers as the home
// group does.
func (s *State) MirroredOverridesVersion() uint64 { return s.ov.version }

// expireOverrides turns the overrides expired at now into tombstones, at
// one new version.
func (s *State) expireOverrides(now int64) {
	if s.ov.mirror {
		return
	}
	var gone []overrideKey
	s.ov.expiring.Ascend(func(e expiryItem) bool {
		if e.at > now {
			return false
		}
		gone = append(gone, e.key)
		return true
	})
	s.killOverrides(gone, now)
}

// dropRulelessOverrides deletes the overrides of rules the set no longer
// has: a rule deleted takes its overrides with it.
func (s *State) dropRulelessOverrides(now int64) {
	var gone []overrideKey
	s.ov.byKey.Ascend(func(it overrideItem) bool {
		if _, ok := s.rules.Get(it.key.rule); !ok && !it.o.GetDeleted() {
			gone = append(gone, it.key)
		}
		return true
	})
	s.killOverrides(gone, now)
}

func (s *State) killOverrides(keys []overrideKey, now int64) {
	if len(keys) == 0 {
		return
	}
	v := s.ov.version + 1
	for _, k := range keys {
		s.ov.kill(k, v, now)
	}
	s.ov.version = v
	s.ov.prune()
}

// eachOverride calls fn for every entry, tombstones included, by key: the
// snapshot's order.
func (s *State) eachOverride(fn func(*allotpb.Override)) {
	s.ov.byKey.Ascend(func(it overrideItem) bool { fn(it.o); return true })
}
