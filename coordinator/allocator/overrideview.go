package allocator

import (
	"sync"
	"sync/atomic"

	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
)

// overrideView is the allocator's copy of the per-tenant overrides, kept
// in step with the replicated state by version (sync, before each report
// is divided), so that dividing a key's allowance reads an override
// without the FSM's lock.
type overrideView struct {
	mu      sync.RWMutex
	m       map[[2]string]viewEntry
	version uint64
	loaded  atomic.Uint64 // version, for the check without the lock
}

type viewEntry struct {
	o       rules.TenantOverride
	expires int64 // ns; 0 never
}

// sync takes in what changed in the state's overrides since the view's
// version, a page at a time, from st: a view of the state, read without
// the FSM's lock, so that a leader taking in a million overrides holds up
// neither Raft's Apply nor the reports.
func (v *overrideView) sync(st *state.View) {
	if st.OverridesVersion() == v.loaded.Load() {
		return // the common case: every report asks, few find a change
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for {
		d := st.OverridesSince(v.version, viewPage)
		if d == nil {
			return
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
			v.m[k] = viewEntry{rulespb.OverrideFromProto(o).TenantOverride, o.GetExpiresUnixNano()}
		}
		v.version = d.GetVersion()
		v.loaded.Store(v.version)
		if !d.GetMore() {
			return
		}
	}
}

// viewPage is how many overrides sync takes in at a time.
const viewPage = 20_000

// get returns tenant's override of rule, if the view holds one. An
// expired override still applies until the state's maintenance deletes
// it (within a maintenance interval), as it does on the agents.
func (v *overrideView) get(rule, tenant string) (rules.TenantOverride, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	e, ok := v.m[[2]string{rule, tenant}]
	return e.o, ok
}
