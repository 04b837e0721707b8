package agent

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/allot-io/allot/algo"
	allotpb "github.com/allot-io/allot/proto"
	"pgregory.net/rapid"
)

// TestUsageCutsLoseNothing hammers the usage table from several
// goroutines with new and returning tenants while another goroutine cuts
// it, dropping idle tenants after a cut or two, and checks that every unit
// counted is reported exactly once. Before a cut published its map under
// the lock, a check landing between the two created a second counter for
// a tenant new since the last cut, and one of the two was never drained:
// issue 10's lost usage of new tenants. Some rules cover every request
// and share one counter (usageTable.every): a unit counted there is
// reported once under each of them.
func TestUsageCutsLoseNothing(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rules := rapid.IntRange(1, 4).Draw(rt, "rules")
		workers := rapid.IntRange(2, 6).Draw(rt, "workers")
		ops := rapid.IntRange(200, 3000).Draw(rt, "ops")
		tenants := rapid.IntRange(1, 2000).Draw(rt, "tenants")
		idle := rapid.IntRange(1, 4).Draw(rt, "idleAfter")
		seed := rapid.Uint64().Draw(rt, "seed")
		var every []int
		var everyBits ruleBits
		for r := range rules {
			if rapid.Bool().Draw(rt, "every") {
				every = append(every, r)
				everyBits.set(r)
			}
		}

		h := algo.NewHasher()
		names := make([]string, rules)
		for i := range names {
			names[i] = "r" + strconv.Itoa(i)
		}
		tab := newUsageTable(rules, everyBits, 1<<20)
		tab.idleAfter = idle
		totals := make([]ruleTotals, rules)
		acc := map[usageKey]*usageCounts{}

		// counted[w][tenant][2*rule+k], what worker w counted.
		counted := make([]map[string][]int64, workers)
		var wg sync.WaitGroup
		var done atomic.Bool
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				x := seed + uint64(w)*0x9e3779b97f4a7c15
				local := map[string][]int64{}
				for i := 0; i < ops; i++ {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
					// Tenants drawn from a range that grows with i: new
					// tenants keep arriving while old ones return.
					span := 1 + tenants*(i+1)/ops
					name := "t" + strconv.Itoa(int(x%uint64(span)))
					r := int(x>>32) % rules
					cost := int64(x>>40)%5 + 1
					slot := 2*r + int(x>>48)%2
					if len(every) > 0 && x>>56%3 == 0 {
						slot = tab.everySlot()
					}
					th := h.String(name)
					for tu := tab.get(th, name, ""); !tu.add(slot, cost); {
						tu = tab.get(th, name, "")
					}
					if local[name] == nil {
						local[name] = make([]int64, 2*rules)
					}
					if slot == tab.everySlot() {
						for _, r := range every {
							local[name][2*r] += cost
						}
					} else {
						local[name][slot] += cost
					}
				}
				counted[w] = local
			}(w)
		}
		cutter := make(chan struct{})
		go func() {
			defer close(cutter)
			for !done.Load() {
				tab.cut(names, 0, acc, totals, nil)
			}
		}()
		wg.Wait()
		done.Store(true)
		<-cutter
		tab.cut(names, 0, acc, totals, nil)

		want := map[string][]int64{}
		for _, local := range counted {
			for name, c := range local {
				if want[name] == nil {
					want[name] = make([]int64, 2*rules)
				}
				for i := range c {
					want[name][i] += c[i]
				}
			}
		}
		got := map[string][]int64{}
		for k, c := range acc {
			r := slices.Index(names, k.rule)
			if got[k.tenant] == nil {
				got[k.tenant] = make([]int64, 2*rules)
			}
			got[k.tenant][2*r] += int64(c.admitted)
			got[k.tenant][2*r+1] += int64(c.denied)
		}
		for _, name := range slices.Sorted(maps.Keys(want)) {
			for i, w := range want[name] {
				var g int64
				if got[name] != nil {
					g = got[name][i]
				}
				if g != w {
					rt.Fatalf("tenant %s rule %d %s: counted %d, reported %d", name, i/2, [2]string{"admitted", "denied"}[i%2], w, g)
				}
			}
			delete(got, name)
		}
		for name, g := range got {
			for i, v := range g {
				if v != 0 {
					rt.Fatalf("tenant %s rule %d: reported %d never counted", name, i/2, v)
				}
			}
		}
	})
}

// TestUsageLongTenantBounded checks that a tenant name over the
// coordinators' limit is billed under its bounded form, which the
// coordinators accept.
func TestUsageLongTenantBounded(t *testing.T) {
	h := algo.NewHasher()
	long := strings.Repeat("é", 400)
	tab := newUsageTable(1, ruleBits{}, 10)
	tab.get(h.String(long), long, "").counts[0].Add(3)
	acc := map[usageKey]*usageCounts{}
	tab.cut([]string{"r"}, 0, acc, make([]ruleTotals, 1), nil)
	for k, c := range acc {
		if k.tenant != allotpb.BoundName(long) || len(k.tenant) > allotpb.MaxNameLen || c.admitted != 3 {
			t.Fatalf("got %q (%d bytes) admitted %d; want the bounded name with 3", k.tenant, len(k.tenant), c.admitted)
		}
	}
}
