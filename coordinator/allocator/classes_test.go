package allocator

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// TestQuietTenantsLeaveTheGlobalPool: a global rule's pool forgets the
// class of a tenant whose claims all expired, and makes it again when the
// tenant reports. It kept every class it had ever made: a leader's memory
// grew with every new tenant for its whole term (make soak, 15-minute
// terms), and every round walked them all.
func TestQuietTenantsLeaveTheGlobalPool(t *testing.T) {
	const ttl = 5 * time.Second
	a := New(Config{Region: "eu", ReportInterval: time.Second, LeaseTTL: ttl})
	set, err := rules.NewSet(1, []rules.Rule{{
		Name: "capacity", Scope: rules.Global, Algorithm: algo.TokenBucket, Limit: 100_000, Period: time.Second, Burst: 100_000,
		Intent: lease.Capacity,
	}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	a.Lead(1, start.UnixNano(), 0)
	a.SetRules(set)
	report := func(at time.Time, tenants ...string) {
		req := &allotpb.ReportRequest{Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: "gw-1", Incarnation: 1,
			Region: "eu", SentUnixNano: at.UnixNano(), IntervalNano: int64(time.Second)}
		for _, tn := range tenants {
			req.Demand = append(req.Demand, &allotpb.KeyDemand{Rule: "capacity", Tenant: tn, Admitted: 10})
		}
		a.fold(req, at.UnixNano())
	}
	classes := func() (n int, keys map[string]int) {
		k := poolKey{"capacity", ""}
		sh := a.shard(k)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		p := sh.pools[k]
		if p == nil {
			return 0, nil
		}
		keys = map[string]int{}
		for key, i := range p.byClass {
			if p.classes[i].key != key {
				t.Fatalf("byClass says %v is class %d, which is %v", key, i, p.classes[i].key)
			}
			keys[key.tenant] = i
		}
		return len(p.classes), keys
	}

	var many []string
	for i := range 1000 {
		many = append(many, fmt.Sprint("t", i))
	}
	report(start, many...)
	a.round(start.UnixNano(), true)
	if n, _ := classes(); n != 1000 {
		t.Fatalf("%d classes after 1,000 tenants reported, want 1,000", n)
	}
	// Only t7 and t999 go on reporting, past the lease TTL.
	at := start
	for range 2 * ttl / time.Second {
		at = at.Add(time.Second)
		report(at, "t7", "t999")
		a.round(at.UnixNano(), true)
	}
	if n, keys := classes(); n != 2 || len(keys) != 2 {
		t.Fatalf("%d classes once the others were quiet for a lease TTL, want t7's and t999's", n)
	} else if _, ok := keys["t999"]; !ok {
		t.Fatalf("classes %v, want t7's and t999's", keys)
	}
	// A quiet tenant that comes back has a class, and a claim, again.
	at = at.Add(time.Second)
	report(at, "t7", "t999", "t3")
	a.round(at.UnixNano(), false)
	if n, keys := classes(); n != 3 || keys["t3"] != 2 {
		t.Fatalf("%d classes %v after t3 came back, want it third", n, keys)
	}
}
