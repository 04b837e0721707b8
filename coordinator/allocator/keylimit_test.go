package allocator

import (
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// TestAllocatorDividesAKeysOwnLimit: a descriptor key reported with a
// limit of its own is divided at that limit, per its period, not the
// rule's; a limit on a key not named for it (rules.CallLimitKeySuffix),
// or on a key of a rule that is no descriptor rule, gets no lease, so
// that no report changes the limit of a key others share.
func TestAllocatorDividesAKeysOwnLimit(t *testing.T) {
	a := New(Config{Region: "eu", ReportInterval: time.Second, LeaseTTL: 5 * time.Second})
	per := rules.Rule{Name: "per-user", Scope: rules.Descriptor, Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Second, Intent: lease.Abuse,
		Match: rules.Match{Domain: "api", Descriptors: []rules.DescriptorEntry{{Key: "user"}}}}
	tenant := rules.Rule{Name: "per-tenant", Scope: rules.Tenant, Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Second, Intent: lease.Abuse}
	set, err := rules.NewSet(1, []rules.Rule{per, tenant})
	if err != nil {
		t.Fatal(err)
	}
	a.SetRules(set)
	a.Lead(1, 0, 1)
	own := "ann" + rules.CallLimitKeySuffix(20, time.Minute, 0)
	demand := func(rule, key string, limit int64) *allotpb.KeyDemand {
		d := &allotpb.KeyDemand{Rule: rule, Key: key, Admitted: 5000}
		if limit > 0 {
			d.Limit, d.PeriodNano = limit, int64(time.Minute)
		}
		return d
	}
	req := &allotpb.ReportRequest{Node: "gw-1", Incarnation: 1, IntervalNano: int64(time.Second), Demand: []*allotpb.KeyDemand{
		demand("per-user", own, 20),
		demand("per-user", "bob", 20),                 // not named for its limit
		demand("per-user", "cat", 0),                  // the rule's
		demand("per-tenant", own, 20),                 // no descriptor rule
		demand("per-user", "ann\x00limit:5/1m0s", 20), // named for another
	}}
	leases := a.report(req, int64(time.Hour))
	got := map[string]float64{}
	for _, l := range leases {
		got[l.GetRule()+"/"+l.GetKey()] = l.GetLimit()
	}
	if l := got["per-user/"+own]; !(l > 0 && l <= 20) {
		t.Errorf("the key's own 20/min leased %v (%v)", l, got)
	}
	if l := got["per-user/cat"]; !(l > 20 && l <= 1000) {
		t.Errorf("the rule's 1000/s leased %v (%v)", l, got)
	}
	for _, k := range []string{"per-user/bob", "per-tenant/" + own, "per-user/ann\x00limit:5/1m0s"} {
		if _, ok := got[k]; ok {
			t.Errorf("%q leased %v; a limit on a key not named for it gets nothing", k, got[k])
		}
	}
	// The pool divides per the key's period: the rule with its limit.
	sh := a.shard(poolKey{"per-user", own})
	sh.mu.Lock()
	p := sh.pools[poolKey{"per-user", own}]
	sh.mu.Unlock()
	if p == nil || p.rule.Period != time.Minute || p.rule.Limit != 20 || p.ruleLimit != 20 || p.limit != 20 {
		t.Fatalf("pool %+v", p)
	}
	// A rule set keeping the rule keeps the pool on its own limit.
	set2, _ := rules.NewSet(2, []rules.Rule{per, tenant})
	a.SetRules(set2)
	sh.mu.Lock()
	p = sh.pools[poolKey{"per-user", own}]
	sh.mu.Unlock()
	if p == nil || p.rule.Period != time.Minute || p.rule.Limit != 20 {
		t.Fatalf("after the rule set was replaced unchanged: pool %+v", p)
	}
}
