package agent

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/allot-io/allot/algo"
	allotpb "github.com/allot-io/allot/proto"
)

// usageTable counts, per tenant and rule, the cost admitted and denied
// since the last cut: what billing needs. Reads take no lock: tenants seen
// before the last cut are in an immutable map replaced at each cut; tenants
// new since then are in a small locked map.
//
// No count may be lost or counted twice, however checks and cuts
// interleave. Two rules keep it so. A cut publishes the next map while it
// holds the lock that guards the new tenants, and get looks at the
// published map again under that lock, so a tenant never has two live
// counters at once. A tenant dropped for being idle has its counters
// drained for the last time by swapping in closed: a check that fetched
// them just before sees its Add return a negative sum, takes the cost
// back, and counts into the tenant's live counters instead (tenantUsage.add).
type usageTable struct {
	rules int
	// every lists the rules that cover every request (no match
	// conditions): an admitted request passed all of them, so its cost is
	// counted once, in the slot after the rules' (everySlot), and read
	// into each of theirs at the cut. Check pays one atomic add for them
	// all instead of one each.
	every     ruleBits
	anyEvery  bool
	max       int
	idleAfter int // cuts in a row with nothing counted that drop a tenant

	// snap is keyed by 64 bits of the tenant's hash, the fast map key;
	// each entry keeps the full hash, and a mismatch (two tenants sharing
	// 64 bits) falls back to the locked map, keyed by the full hash.
	snap  atomic.Pointer[tenantSnap]
	mu    sync.Mutex
	fresh map[algo.Hash]*tenantUsage
	count int // tenants in snap and fresh, guarded by mu

	overflow *tenantUsage // tenants beyond max, counted together
	dropped  atomic.Int64 // requests counted in overflow
}

// closed is what a dropped tenant's counters hold once drained for the
// last time. It is so far below zero that no run of Adds brings a counter
// back to zero or above (2^31 requests of MaxCost each add under 2^63).
const closed = math.MinInt64 / 2

// idleCuts is how many cuts in a row with nothing counted drop a tenant:
// five minutes at the default interval.
const idleCuts = 300

// tenantUsage is one tenant's counters: admitted and denied per rule.
type tenantUsage struct {
	hash   algo.Hash
	name   string         // as billed: within allotpb.MaxNameLen
	plan   string         // the plan of the tenant's first request
	counts []atomic.Int64 // [2*rule] admitted, [2*rule+1] denied, [everySlot] admitted under every rule in every
	idle   int            // cuts in a row with nothing counted
}

// add counts cost into a counter. It returns false, having taken the cost
// back, when the tenant was dropped from the table and its counters closed:
// the caller counts into the tenant's live counters (usageTable.get).
func (tu *tenantUsage) add(slot int, cost int64) bool {
	if tu.counts[slot].Add(cost) >= 0 {
		return true
	}
	tu.counts[slot].Add(-cost)
	return false
}

// newUsageTable makes the counters of a rule set of rules rules, of
// which those in every cover every request.
func newUsageTable(rules int, every ruleBits, max int) *usageTable {
	t := &usageTable{rules: rules, every: every, anyEvery: every != ruleBits{}, max: max, idleAfter: idleCuts, fresh: map[algo.Hash]*tenantUsage{}}
	t.overflow = &tenantUsage{counts: make([]atomic.Int64, t.slots())}
	t.snap.Store(newTenantSnap(nil))
	return t
}

// everySlot is the counter of the cost admitted under every rule in every.
func (t *usageTable) everySlot() int { return 2 * t.rules }

// slots is how many counters a tenant has.
func (t *usageTable) slots() int { return 2*t.rules + 1 }

// lookup finds a tenant in the published map.
func (t *usageTable) lookup(h algo.Hash) *tenantUsage {
	return t.snap.Load().get(h)
}

// get returns a tenant's counters, creating them the first time. A tenant
// name longer than the coordinators accept is billed under a bounded form
// of it (allotpb.BoundName), the same on every node.
func (t *usageTable) get(h algo.Hash, tenant, plan string) *tenantUsage {
	if tu := t.lookup(h); tu != nil {
		return tu
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// A cut may have moved the tenant into a newly published map since
	// the lock-free look; the cut publishes under this lock.
	if tu := t.lookup(h); tu != nil {
		return tu
	}
	if tu := t.fresh[h]; tu != nil {
		return tu
	}
	if t.count >= t.max {
		t.dropped.Add(1)
		return t.overflow
	}
	tu := &tenantUsage{hash: h, name: allotpb.BoundName(strings.Clone(tenant)), plan: strings.Clone(plan), counts: make([]atomic.Int64, t.slots())}
	t.fresh[h] = tu
	t.count++
	return tu
}

// usageKey is one line of a usage batch.
type usageKey struct {
	rule, tenant string
	window       int64 // Unix seconds
}

type usageCounts struct{ admitted, denied uint64 }

// tenantCount is one tenant's count under one rule since the last cut.
type tenantCount struct {
	rule             int
	tenant           *tenantUsage
	admitted, denied int64
}

// cut moves every counter into acc under the given billing window, and
// folds new tenants into the lock-free map. Tenants idle for many cuts are
// forgotten, so the table holds the tenants of the last few minutes. It
// returns the counts pick (when set) picks out, for the reporter to act on
// once the table's locks are released. With acc nil only the totals are
// kept. Cuts run on one goroutine at a time.
func (t *usageTable) cut(names []string, window int64, acc map[usageKey]*usageCounts, totals []ruleTotals, pick func(rule int, adm, den int64) bool) []tenantCount {
	var counted []tenantCount
	t.mu.Lock()
	old := t.snap.Load().m
	next := make(map[uint64]*tenantUsage, len(old)+len(t.fresh))
	for k, tu := range old {
		next[k] = tu
	}
	keep := map[algo.Hash]*tenantUsage{}
	for h, tu := range t.fresh {
		if other := next[h.Uint64()]; other != nil && other.hash != h {
			keep[h] = tu // 64 bits shared with another tenant: stays locked
			continue
		}
		next[h.Uint64()] = tu
	}
	t.fresh = keep
	t.snap.Store(newTenantSnap(next))
	t.mu.Unlock()

	// drain moves a tenant's counters into acc, leaving reset (0, or
	// closed for a tenant being dropped) in their place.
	drain := func(tu *tenantUsage, reset int64) bool {
		any := false
		every := max(tu.counts[t.everySlot()].Swap(reset), 0)
		for r := 0; r < t.rules; r++ {
			adm, den := tu.counts[2*r].Swap(reset), tu.counts[2*r+1].Swap(reset)
			if t.every.has(r) {
				adm = max(adm, 0) + every
			}
			if adm == 0 && den == 0 {
				continue
			}
			any = true
			if pick != nil && tu != t.overflow && pick(r, adm, den) {
				counted = append(counted, tenantCount{r, tu, adm, den})
			}
			totals[r].add(adm, den)
			if acc == nil {
				continue // totals only (a standalone agent bills nobody)
			}
			k := usageKey{rule: names[r], tenant: tu.name, window: window}
			c := acc[k]
			if c == nil {
				c = &usageCounts{}
				acc[k] = c
			}
			c.admitted = allotpb.SaturatingAdd(c.admitted, uint64(max(adm, 0)))
			c.denied = allotpb.SaturatingAdd(c.denied, uint64(max(den, 0)))
		}
		return any
	}
	var idle []uint64
	for k, tu := range next {
		if drain(tu, 0) {
			tu.idle = 0
		} else if tu.idle++; tu.idle > t.idleAfter {
			idle = append(idle, k)
		}
	}
	t.mu.Lock()
	for _, tu := range t.fresh {
		drain(tu, 0)
	}
	held := len(next)
	if len(idle) > 0 {
		pruned := make(map[uint64]*tenantUsage, len(next))
		for k, tu := range next {
			pruned[k] = tu
		}
		for _, k := range idle {
			delete(pruned, k)
		}
		t.snap.Store(newTenantSnap(pruned))
		held = len(pruned)
	}
	t.count = held + len(t.fresh)
	t.mu.Unlock()
	// Dropped tenants are closed only once no map holds them: a check
	// that finds them closed looks them up again and gets new counters.
	for _, k := range idle {
		drain(next[k], closed)
	}
	drain(t.overflow, 0)
	return counted
}

// ruleTotals are a rule's cumulative counts, for metrics.
type ruleTotals struct {
	admitted, denied atomic.Int64
}

// add counts a cut's admitted and denied cost, stopping at the largest
// int64 instead of wrapping. Only the cutting goroutine adds.
func (t *ruleTotals) add(adm, den int64) {
	t.admitted.Store(saturating(t.admitted.Load(), adm))
	t.denied.Store(saturating(t.denied.Load(), den))
}

func saturating(a, b int64) int64 {
	if s := a + b; b < 0 || s >= a {
		return s
	}
	return math.MaxInt64
}

// live sums the counters not yet cut, per rule: [2*rule] admitted,
// [2*rule+1] denied.
func (t *usageTable) live() []int64 {
	sums := make([]int64, 2*t.rules)
	add := func(tu *tenantUsage) {
		for i := range sums {
			// A dropped tenant's counters hold closed: drained already.
			sums[i] += max(tu.counts[i].Load(), 0)
		}
		every := max(tu.counts[t.everySlot()].Load(), 0)
		for r := range t.rules {
			if t.every.has(r) {
				sums[2*r] += every
			}
		}
	}
	for _, tu := range t.snap.Load().m {
		add(tu)
	}
	t.mu.Lock()
	for _, tu := range t.fresh {
		add(tu)
	}
	t.mu.Unlock()
	add(t.overflow)
	return sums
}

// tenantSnap is the tenants published at a cut: the map the cut works
// on, and an open-addressing index of the same tenants that Check reads.
// The index finds a tenant in one or two probes of a flat array, where a
// Go map lookup cost a check 15–20 ns. Both are immutable once published.
type tenantSnap struct {
	m     map[uint64]*tenantUsage
	slots []tenantSlot // a power of two, at most half full
}

type tenantSlot struct {
	key uint64 // 64 bits of the tenant's hash; a slot without tu is empty
	tu  *tenantUsage
}

func newTenantSnap(m map[uint64]*tenantUsage) *tenantSnap {
	n := 2
	for n < 2*len(m) {
		n <<= 1
	}
	s := &tenantSnap{m: m, slots: make([]tenantSlot, n)}
	mask := uint64(n - 1)
	for k, tu := range m {
		i := k & mask
		for s.slots[i].tu != nil {
			i = (i + 1) & mask
		}
		s.slots[i] = tenantSlot{k, tu}
	}
	return s
}

// get returns the tenant of hash h, or nil.
func (s *tenantSnap) get(h algo.Hash) *tenantUsage {
	k := h.Uint64()
	mask := uint64(len(s.slots) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		sl := &s.slots[i]
		if sl.tu == nil {
			return nil
		}
		if sl.key == k {
			if sl.tu.hash == h {
				return sl.tu
			}
			return nil
		}
	}
}
