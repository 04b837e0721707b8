package agent

import (
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
type usageTable struct {
	rules int
	max   int

	// snap is keyed by 64 bits of the tenant's hash, the fast map key;
	// each entry keeps the full hash, and a mismatch (two tenants sharing
	// 64 bits) falls back to the locked map, keyed by the full hash.
	snap  atomic.Pointer[map[uint64]*tenantUsage]
	mu    sync.Mutex
	fresh map[algo.Hash]*tenantUsage
	count int // tenants in snap and fresh, guarded by mu

	overflow *tenantUsage // tenants beyond max, counted together
	dropped  atomic.Int64 // requests counted in overflow
	// retired tenants were dropped from the map at the last cut; a check
	// that fetched one just before may still count into it, so they are
	// drained once more at the next cut.
	retired []*tenantUsage
}

// tenantUsage is one tenant's counters: admitted and denied per rule.
type tenantUsage struct {
	hash   algo.Hash
	name   string
	plan   string         // the plan of the tenant's first request
	counts []atomic.Int64 // [2*rule] admitted, [2*rule+1] denied
	idle   int            // cuts in a row with nothing counted
}

func newUsageTable(rules, max int) *usageTable {
	t := &usageTable{rules: rules, max: max, fresh: map[algo.Hash]*tenantUsage{}}
	t.overflow = &tenantUsage{counts: make([]atomic.Int64, 2*rules)}
	empty := map[uint64]*tenantUsage{}
	t.snap.Store(&empty)
	return t
}

// get returns a tenant's counters, creating them the first time.
func (t *usageTable) get(h algo.Hash, tenant, plan string) *tenantUsage {
	if tu := (*t.snap.Load())[h.Uint64()]; tu != nil && tu.hash == h {
		return tu
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tu := t.fresh[h]; tu != nil {
		return tu
	}
	if t.count >= t.max {
		t.dropped.Add(1)
		return t.overflow
	}
	tu := &tenantUsage{hash: h, name: strings.Clone(tenant), plan: strings.Clone(plan), counts: make([]atomic.Int64, 2*t.rules)}
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
// kept.
func (t *usageTable) cut(names []string, window int64, acc map[usageKey]*usageCounts, totals []ruleTotals, pick func(rule int, adm, den int64) bool) []tenantCount {
	var counted []tenantCount
	old := *t.snap.Load()
	t.mu.Lock()
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
	t.mu.Unlock()

	drain := func(tu *tenantUsage) bool {
		any := false
		for r := 0; r < t.rules; r++ {
			adm, den := tu.counts[2*r].Swap(0), tu.counts[2*r+1].Swap(0)
			if adm == 0 && den == 0 {
				continue
			}
			any = true
			if pick != nil && tu != t.overflow && pick(r, adm, den) {
				counted = append(counted, tenantCount{r, tu, adm, den})
			}
			totals[r].admitted.Add(adm)
			totals[r].denied.Add(den)
			if acc == nil {
				continue // totals only (a standalone agent bills nobody)
			}
			k := usageKey{rule: names[r], tenant: tu.name, window: window}
			c := acc[k]
			if c == nil {
				c = &usageCounts{}
				acc[k] = c
			}
			c.admitted += uint64(max(adm, 0))
			c.denied += uint64(max(den, 0))
		}
		return any
	}
	for _, tu := range t.retired {
		drain(tu)
	}
	t.retired = t.retired[:0]
	for k, tu := range next {
		if drain(tu) {
			tu.idle = 0
		} else if tu.idle++; tu.idle > 300 {
			delete(next, k)
			t.retired = append(t.retired, tu)
		}
	}
	t.mu.Lock()
	for _, tu := range t.fresh {
		drain(tu)
	}
	t.mu.Unlock()
	drain(t.overflow)
	t.mu.Lock()
	t.count = len(next) + len(t.fresh)
	t.mu.Unlock()
	t.snap.Store(&next)
	return counted
}

// ruleTotals are a rule's cumulative counts, for metrics.
type ruleTotals struct {
	admitted, denied atomic.Int64
}

// batch turns accumulated counts into a usage batch.
func batch(seq uint64, cut int64, acc map[usageKey]*usageCounts) *allotpb.UsageBatch {
	b := &allotpb.UsageBatch{Seq: seq, CutUnixNano: cut, Counts: make([]*allotpb.UsageCount, 0, len(acc))}
	for k, c := range acc {
		b.Counts = append(b.Counts, &allotpb.UsageCount{Rule: k.rule, Tenant: k.tenant, WindowUnix: k.window, Admitted: c.admitted, Denied: c.denied})
	}
	return b
}

// live sums the counters not yet cut, per rule: [2*rule] admitted,
// [2*rule+1] denied.
func (t *usageTable) live() []int64 {
	sums := make([]int64, 2*t.rules)
	add := func(tu *tenantUsage) {
		for i := range sums {
			sums[i] += tu.counts[i].Load()
		}
	}
	for _, tu := range *t.snap.Load() {
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
