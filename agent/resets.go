package agent

import (
	"sync/atomic"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// Key resets, made through the coordinators' ResetsService, start one
// key's counters afresh on every node (docs/operations.md#resetting-a-key).
// The agent follows them by version in the answers to its reports, as it
// follows overrides, and acts on each once, on the reporter goroutine:
//
//   - a key: its state is removed from the stores that may hold it
//     (algo.Keyed.ResetHash), and a hot key's limiter starts afresh,
//     keeping its lease. The lease is the node's part of a division of
//     the key's limit, so the fleet admits at most the limit again: the
//     coordinators forget what the key's pool counted as spent at the
//     same time, and keep counting what each node holds, so the next
//     division starts from what the reset nodes say they spent, and a
//     node that hears of the reset late is not granted away meanwhile.
//     Demoting the key instead would be as safe, but every node would
//     then wait a report for a lease again, on a key that was just busy.
//   - every key of a tenant, under a rule whose key has other attributes
//     too: the store holds only 128-bit hashes of keys, so the tenant's
//     keys cannot be found in it. The tenant gets a store of its own,
//     fresh (a marked entry of the rule's tenant table, as overridden
//     tenants have; an overridden tenant's store is replaced), and its
//     hot keys start afresh as above.
//   - a global rule's one key: the node's total and every class.
//
// The usage counted before the reset stays counted: the ledger keeps it.

// resetBook is where the reporter is in the coordinators' resets.
type resetBook struct {
	version uint64
	// following is set once an answer told the version: before that the
	// process is new, and its state younger than the resets made.
	following bool
	// taken counts the resets acted on, for tests.
	taken atomic.Int64
}

// takeResets acts on a report answer's resets, each once.
func (r *reporter) takeResets(d *allotpb.ResetsDelta) {
	defer func() { r.resets.following = true }()
	if d == nil {
		return
	}
	if r.resets.following {
		c := r.a.rules.Load()
		for _, x := range d.GetResets() {
			if x.GetVersion() <= r.resets.version {
				continue // a lagging shard group's page
			}
			r.resetKey(c, x)
			r.resets.taken.Add(1)
		}
	}
	if d.GetFull() && len(d.GetResets()) == 0 {
		// A cluster restored from a backup, or another one: its
		// numbering is the one to follow now.
		r.resets.version = d.GetVersion()
		return
	}
	if d.GetFull() {
		r.a.log.Warn("some key resets were made while this agent was out of touch, and are no longer kept; the ones kept were applied", "version", d.GetVersion())
	}
	r.resets.version = max(r.resets.version, d.GetVersion())
}

// resetKey acts on one reset, if its rule is enforced here.
func (r *reporter) resetKey(c *compiled, x *allotpb.Reset) {
	a := r.a
	var rs *ruleState
	if c != nil {
		for _, s := range c.rules {
			if s.rule.Name == x.GetRule() {
				rs = s
				break
			}
		}
	}
	if rs == nil || rs.descriptor {
		a.log.Debug("a key reset of a rule not enforced here", "rule", x.GetRule(), "version", x.GetVersion())
		return
	}
	switch {
	case rs.rule.Scope == rules.Global:
		rs.resetGlobal()
	case x.GetAllKeys():
		rs.resetTenant(x.GetTenant())
	default:
		req := Request{Tenant: x.GetTenant(), User: x.GetUser(), Route: x.GetRoute(), IP: x.GetIp()}
		var rh reqHashes
		h := rs.keyHash(a, &rh, &req)
		for _, st := range rs.tenantStores(req.Tenant) {
			st.keyed.ResetHash(h)
		}
		if hk := (*rs.hot.Load())[h]; hk != nil {
			hk.lim.Reset()
		}
	}
	a.log.Info("key reset", "rule", x.GetRule(), "tenant", x.GetTenant(), "key", x.GetKey(), "all_keys", x.GetAllKeys(), "version", x.GetVersion(), "by", x.GetBy())
}

// tenantStores are the stores that may hold a tenant's keys: the rule's,
// every plan's (the reset names no plan), the rule file's for the tenant,
// and the tenant's own if made. None is made here.
func (rs *ruleState) tenantStores(tenant string) []*limitStore {
	out := []*limitStore{rs.def}
	for _, st := range rs.byPlan {
		out = append(out, st)
	}
	if st := rs.byTenant[tenant]; st != nil {
		out = append(out, st)
	}
	if to := rs.overrides.get(tenant); to != nil {
		if st := to.store.Load(); st != nil {
			out = append(out, st)
		}
	}
	return out
}

// resetTenant starts every key of tenant afresh: a fresh store of the
// tenant's own, made at its next check, and its hot keys reset.
func (rs *ruleState) resetTenant(tenant string) {
	fresh := &tenantOverride{reset: true}
	if to := rs.overrides.get(tenant); to != nil {
		fresh.o, fresh.expires = to.o, to.expires
	}
	rs.overrides.apply(map[string]*tenantOverride{tenant: fresh})
	for h, hk := range *rs.hot.Load() {
		if hk.tenant == tenant {
			hk.lim.Reset()
			// What its old store held from before it was hot is gone
			// too, should the key be given back there.
			hk.store.keyed.ResetHash(h)
		}
	}
}

// resetGlobal starts a global rule's one key afresh: every store's node
// total and every class's limiter. The stripes of a total keep the few
// units they hold (within the rule's tolerance).
func (rs *ruleState) resetGlobal() {
	for _, st := range rs.stores() {
		if st.single != nil {
			st.single.Limiter().Reset()
			for i := range st.closed {
				st.closed[i].Store(0)
			}
		}
	}
	if rs.fair != nil {
		for _, hk := range *rs.fair.classes.Load() {
			hk.lim.Reset()
		}
	}
}
