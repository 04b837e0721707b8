package agent

import (
	"cmp"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
)

// Overrides from the coordinators' overrides API change one rule's limit
// or weight for one tenant. The agent follows them by version, in the
// answers to its reports, and keeps them in two places:
//
//   - the reporter's book of every override (overrideBook), by rule and
//     tenant, with tombstones, which a new rule set is filled from;
//   - each rule's tenant table (tenantTable), which checks read without a
//     lock: copy-on-write shards, each a map from tenant to override.
//
// An overridden tenant's keys live in a store of their own, made at the
// tenant's first check and sized for one tenant, so that a million
// overrides cost their entries, not a million stores, on a node that sees
// few of those tenants. A changed override starts the tenant's keys
// afresh on each node, as a changed rule does; the ledger keeps counting.

// overrideShards is how many shards a tenant table has.
const overrideShards = 64

// tenantOverride is one tenant's override of one rule, as checks read it;
// replaced whole when the override changes.
type tenantOverride struct {
	o       rules.TenantOverride
	expires int64 // ns on the coordinators' clock; 0 never
	// reset marks a tenant all of whose keys were reset (resets.go): its
	// keys stay in a store of their own, made fresh, as the rule's stores
	// still hold what they spent before the reset. A later override, or
	// its deletion, keeps the mark.
	reset bool
	store atomic.Pointer[limitStore]
}

// tenantTable is a rule's overrides, by tenant.
type tenantTable struct {
	n      atomic.Int64 // entries; checks skip the table when 0
	seed   maphash.Seed
	shards [overrideShards]atomic.Pointer[map[string]*tenantOverride]

	mu     sync.Mutex    // writers, and the making of stores
	stores []*limitStore // the stores made, for reports and reshares
}

func newTenantTable() *tenantTable { return &tenantTable{seed: maphash.MakeSeed()} }

func (t *tenantTable) shard(tenant string) *atomic.Pointer[map[string]*tenantOverride] {
	return &t.shards[maphash.String(t.seed, tenant)%overrideShards]
}

// get returns tenant's override, or nil.
func (t *tenantTable) get(tenant string) *tenantOverride {
	if t == nil || t.n.Load() == 0 {
		return nil
	}
	m := t.shard(tenant).Load()
	if m == nil {
		return nil
	}
	return (*m)[tenant]
}

// apply sets (o non-nil) and deletes (o nil) entries: one copy of each
// shard changed.
func (t *tenantTable) apply(changes map[string]*tenantOverride) {
	t.mu.Lock()
	defer t.mu.Unlock()
	byShard := map[*atomic.Pointer[map[string]*tenantOverride]][]string{}
	for tenant := range changes {
		sh := t.shard(tenant)
		byShard[sh] = append(byShard[sh], tenant)
	}
	for sh, tenants := range byShard {
		next := map[string]*tenantOverride{}
		if m := sh.Load(); m != nil {
			next = make(map[string]*tenantOverride, len(*m)+len(tenants))
			for k, v := range *m {
				next[k] = v
			}
		}
		for _, tenant := range tenants {
			o := changes[tenant]
			if old := next[tenant]; old != nil {
				t.n.Add(-1)
				if st := old.store.Load(); st != nil {
					t.stores = slices.DeleteFunc(t.stores, func(s *limitStore) bool { return s == st })
				}
				delete(next, tenant)
				if old.reset && o == nil {
					o = &tenantOverride{reset: true}
				} else if old.reset {
					o.reset = true
				}
			}
			if o != nil {
				next[tenant] = o
				t.n.Add(1)
			}
		}
		sh.Store(&next)
	}
}

// made returns the stores made so far.
func (t *tenantTable) made() []*limitStore {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.stores)
}

// overrideStore returns the store of an overridden (or reset) tenant's
// keys, making it at the tenant's first check: of the override's limit
// (its cap, with overage: rules.Rule.Cap), or when it sets none that of
// the store the tenant had. A store the algorithm refuses (it cannot:
// the coordinators validated the limit) leaves the tenant on the rule's
// own store.
func (rs *ruleState) overrideStore(to *tenantOverride, req *Request) *limitStore {
	if st := to.store.Load(); st != nil {
		return st
	}
	t := rs.overrides
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := to.store.Load(); st != nil {
		return st
	}
	base := rs.baseStore(req)
	limit, anchor := rs.rule.Cap(to.o.Limit), to.o.Cycle
	if limit <= 0 {
		limit = base.limit // a cap already
	}
	if anchor.IsZero() {
		// The cycle of the entry whose limit the tenant had: its plan's,
		// or its rule file entry's (rules.Rule.CycleFor).
		if c := base.ruleOf(rs).Cycle; c != nil {
			anchor = c.Anchor
		}
	}
	st, err := rs.makeStore(limit, anchor)
	if err != nil {
		return nil
	}
	to.store.Store(st)
	t.stores = append(t.stores, st)
	return st
}

// overrideBook is the reporter's record of every override the
// coordinators sent, tombstones included, and the version it is at.
type overrideBook struct {
	version uint64
	byRule  map[string]map[string]*allotpb.Override
	// expiries are the overrides that expire, soonest first (entries
	// changed since are skipped when their time comes).
	expiries []expiry
}

type expiry struct {
	at           int64
	rule, tenant string
}

// take applies an OverridesDelta to the book and returns, by rule, what
// changed for the tenant tables (nil for a deletion), and whether every
// table must be filled afresh (a full delta). An entry older than the
// one the book holds is ignored: a shard group's answer may lag the home
// group's.
func (b *overrideBook) take(d *allotpb.OverridesDelta) (changed map[string]map[string]*allotpb.Override, full bool) {
	if d.GetFull() {
		if d.GetVersion() < b.version {
			return nil, false // a lagging group's: the book is newer
		}
		b.byRule, b.expiries = nil, nil
		full = true
	}
	if b.byRule == nil {
		b.byRule = map[string]map[string]*allotpb.Override{}
	}
	changed = map[string]map[string]*allotpb.Override{}
	sorted := true
	for _, o := range d.GetOverrides() {
		rule, tenant := o.GetRule(), o.GetTenant()
		m := b.byRule[rule]
		if m == nil {
			m = map[string]*allotpb.Override{}
			b.byRule[rule] = m
		}
		if old := m[tenant]; old != nil && old.GetVersion() >= o.GetVersion() {
			continue
		}
		m[tenant] = o
		if at := o.GetExpiresUnixNano(); at != 0 && !o.GetDeleted() {
			b.expiries = append(b.expiries, expiry{at, rule, tenant})
			sorted = false
		}
		if changed[rule] == nil {
			changed[rule] = map[string]*allotpb.Override{}
		}
		changed[rule][tenant] = o
	}
	if !sorted {
		slices.SortFunc(b.expiries, func(x, y expiry) int { return cmp.Compare(x.at, y.at) })
	}
	if full {
		b.version = d.GetVersion()
	} else {
		b.version = max(b.version, d.GetVersion())
	}
	return changed, full
}

// entries converts a rule's book entries to tenant table changes.
func tableChanges(in map[string]*allotpb.Override) map[string]*tenantOverride {
	out := make(map[string]*tenantOverride, len(in))
	for tenant, o := range in {
		if o.GetDeleted() {
			out[tenant] = nil
			continue
		}
		out[tenant] = &tenantOverride{o: rulespb.OverrideFromProto(o).TenantOverride, expires: o.GetExpiresUnixNano()}
	}
	return out
}

// takeOverrides applies a report answer's overrides to the book and to
// the enforced rules' tenant tables.
func (r *reporter) takeOverrides(d *allotpb.OverridesDelta) {
	if d == nil {
		return
	}
	changed, full := r.overrides.take(d)
	c := r.a.rules.Load()
	if c == nil {
		return
	}
	for _, rs := range c.rules {
		if rs.overrides == nil {
			continue
		}
		if full {
			rs.fillOverrides(&r.overrides)
		} else if ch := changed[rs.rule.Name]; len(ch) > 0 {
			rs.overrides.apply(tableChanges(ch))
		}
	}
	if len(changed) > 0 || full {
		r.a.log.Debug("overrides updated", "version", r.overrides.version, "full", full)
	}
}

// fillOverrides makes the rule's tenant table hold exactly the book's
// overrides of the rule.
func (rs *ruleState) fillOverrides(b *overrideBook) {
	ch := map[string]*tenantOverride{}
	for i := range rs.overrides.shards {
		if m := rs.overrides.shards[i].Load(); m != nil {
			for tenant, to := range *m {
				if to.reset && to.o == (rules.TenantOverride{}) {
					continue // a reset tenant with no override: kept as it is
				}
				ch[tenant] = nil
			}
		}
	}
	for tenant, o := range tableChanges(b.byRule[rs.rule.Name]) {
		ch[tenant] = o
	}
	rs.overrides.apply(ch)
}

// expireOverrides deletes the overrides whose expiry has passed at now
// (ns, the coordinators' clock) from the tenant tables: the coordinators'
// deletion follows within their maintenance interval.
func (r *reporter) expireOverrides(now int64) {
	b := &r.overrides
	if len(b.expiries) == 0 || b.expiries[0].at > now {
		return
	}
	gone := map[string]map[string]*tenantOverride{}
	for len(b.expiries) > 0 && b.expiries[0].at <= now {
		e := b.expiries[0]
		b.expiries = b.expiries[1:]
		if o := b.byRule[e.rule][e.tenant]; o != nil && !o.GetDeleted() && o.GetExpiresUnixNano() == e.at {
			if gone[e.rule] == nil {
				gone[e.rule] = map[string]*tenantOverride{}
			}
			gone[e.rule][e.tenant] = nil
		}
	}
	c := r.a.rules.Load()
	if c == nil {
		return
	}
	for _, rs := range c.rules {
		if g := gone[rs.rule.Name]; len(g) > 0 && rs.overrides != nil {
			rs.overrides.apply(g)
		}
	}
}

// overrideStoreMaker makes the stores of rs's overridden tenants: sized
// for one tenant's keys (a single shard when the key is the tenant).
func (a *Agent) overrideStoreMaker(rs *ruleState) func(int64, rules.Anchor) (*limitStore, error) {
	opts := a.keyedOptions(&rs.rule)
	opts.Shards = 16
	if attrs := rs.attrs; len(attrs) == 1 && attrs[0] == rules.AttrTenant {
		opts.Shards = 1
	}
	return func(limit int64, anchor rules.Anchor) (*limitStore, error) {
		return rs.newLimitStore(limit, anchor, a.cfg.Region, int(a.nodes.Load()), opts)
	}
}
