package agent

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkOverridesMemory takes 1,000,000 overrides of one rule, as
// report answers bring them, and reports the heap each costs an agent
// (B/override), then what a tenant's first check adds: its store
// (B/active).
func BenchmarkOverridesMemory(b *testing.B) {
	const n, active = 1_000_000, 10_000
	for b.Loop() {
		b.StopTimer()
		a := standalone(b, nil, rule("plan-quota", rules.Tenant, algo.GCRA, 100, time.Second, lease.Quota))
		r := &reporter{a: a}
		var pages []*allotpb.OverridesDelta
		for p := 0; p < n/20_000; p++ {
			d := &allotpb.OverridesDelta{Version: uint64(p + 1)}
			for i := range 20_000 {
				d.Overrides = append(d.Overrides, &allotpb.Override{Rule: "plan-quota", Tenant: fmt.Sprintf("tenant-%07d", p*20_000+i), Limit: int64(1000 + i), Version: uint64(p + 1)})
			}
			pages = append(pages, d)
		}
		before := heapNow()
		start := time.Now()
		for _, d := range pages {
			r.takeOverrides(d)
		}
		took := time.Since(start)
		pages = nil
		mid := heapNow()
		for i := range active {
			a.Check(Request{Tenant: fmt.Sprintf("tenant-%07d", i*(n/active))})
		}
		after := heapNow()
		if d := a.Check(Request{Tenant: "tenant-0999999"}); d.Limit != 1000+19_999 {
			b.Fatalf("limit %d", d.Limit)
		}
		b.ReportMetric(float64(mid-before)/n, "B/override")
		b.ReportMetric(float64(after-mid)/active, "B/active")
		b.ReportMetric(float64(took.Nanoseconds())/n, "ns/override")
		runtime.KeepAlive(r)
		b.StartTimer()
	}
}

// BenchmarkCheckOverridden: a check of an overridden tenant against one
// of a tenant the rule's own limit covers, in a rule with 100,000
// overrides; every check admitted.
func BenchmarkCheckOverridden(b *testing.B) {
	a := standalone(b, nil, rule("plan-quota", rules.Tenant, algo.FixedWindow, 1<<40, time.Hour, lease.Capacity))
	r := &reporter{a: a}
	d := &allotpb.OverridesDelta{Version: 1}
	for i := range 100_000 {
		d.Overrides = append(d.Overrides, &allotpb.Override{Rule: "plan-quota", Tenant: fmt.Sprintf("t%d", i), Limit: 1 << 40, Version: 1})
	}
	r.takeOverrides(d)
	for _, tc := range []struct{ name, tenant string }{{"rule-limit", "plain"}, {"overridden", "t4242"}} {
		b.Run(tc.name, func(b *testing.B) {
			req := Request{Tenant: tc.tenant}
			b.ReportAllocs()
			for b.Loop() {
				if !a.Check(req).Allowed {
					b.Fatal("refused")
				}
			}
		})
	}
}
