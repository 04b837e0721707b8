package coordinator

import (
	"sync"

	"github.com/allot-io/allot/coordinator/internal/fsm/state"
	"github.com/allot-io/allot/lease/rules"
)

// overrideView is the allocator's copy of the per-tenant overrides, kept
// in step with the replicated state by version (sync, before each report
// is divided), so that dividing a key's allowance reads an override
// without the FSM's lock.
type overrideView struct {
	mu      sync.RWMutex
	m       map[[2]string]viewEntry
	version uint64
}

type viewEntry struct {
	o       rules.TenantOverride
	expires int64 // ns; 0 never
}

// sync takes in what changed in st's overrides since the view's version.
// The caller holds the FSM's read lock (or owns st).
func (v *overrideView) sync(st *state.State) {
	v.mu.RLock()
	current := v.version == st.OverridesVersion()
	v.mu.RUnlock()
	if current {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for v.version != st.OverridesVersion() {
		d := st.OverridesSince(v.version, 1<<20)
		if d == nil {
			break
		}
		if d.GetFull() || v.m == nil {
			v.m = make(map[[2]string]viewEntry, len(d.GetOverrides()))
		}
		for _, o := range d.GetOverrides() {
			k := [2]string{o.GetRule(), o.GetTenant()}
			if o.GetDeleted() {
				delete(v.m, k)
				continue
			}
			v.m[k] = viewEntry{rules.TenantOverride{Limit: o.GetLimit(), Weight: o.GetWeight()}, o.GetExpiresUnixNano()}
		}
		v.version = d.GetVersion()
	}
}

// get returns tenant's override of rule, if the view holds one. An
// expired override still applies until the state's maintenance deletes
// it (within a maintenance interval), as it does on the agents.
func (v *overrideView) get(rule, tenant string) (rules.TenantOverride, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	e, ok := v.m[[2]string{rule, tenant}]
	return e.o, ok
}

// count is how many overrides the view holds.
func (v *overrideView) count() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.m)
}
