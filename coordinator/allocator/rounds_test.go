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

// TestFullPassesSpreadOverTheLeasePeriod: every pool is divided once a
// lease period even when nothing marks it (so that silent nodes' leases
// are reclaimed), and those full passes are spread over the period's
// rounds, a shard at a time, not made all in one round. With 400,000
// keys the one round that divided them all took most of a second
// (BenchmarkRoundsManyKeys), and every report waiting for that round
// waited as long.
func TestFullPassesSpreadOverTheLeasePeriod(t *testing.T) {
	const (
		ttl   = 5 * time.Second
		every = 250 * time.Millisecond
		keys  = 3200
	)
	a := New(Config{Region: "eu", ReportInterval: time.Second, LeaseTTL: ttl})
	set, err := rules.NewSet(1, []rules.Rule{{
		Name: "per-user", Scope: rules.User, Algorithm: algo.GCRA, Limit: 100, Period: time.Second, Burst: 10,
		Intent: lease.Capacity,
	}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC).UnixNano()
	a.Lead(1, now, 0)
	a.SetRules(set)
	req := &allotpb.ReportRequest{Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: "gw-1", Incarnation: 1,
		Region: "eu", SentUnixNano: now, IntervalNano: int64(time.Second)}
	for k := range keys {
		req.Demand = append(req.Demand, &allotpb.KeyDemand{Rule: "per-user", Key: fmt.Sprintf("u%d", k), Admitted: 5, Held: 5})
	}
	a.answer(a.fold(req, now), now)
	a.Tick(now) // the new pools, marked by the report

	// divided gives, per shard, the pools divided since the last call: a
	// division stamps each claim with its sequence number, and drops a
	// pool whose claims all expired.
	type seen struct {
		shard int
		seq   uint64
	}
	last := map[*pool]seen{}
	divided := func() (perShard [allocShards]int) {
		cur := map[*pool]seen{}
		for i := range a.shards {
			sh := &a.shards[i]
			sh.mu.Lock()
			for _, p := range sh.pools {
				cur[p] = seen{i, p.classes[0].claims[0].seq}
				if was, ok := last[p]; ok && was.seq != cur[p].seq {
					perShard[i]++
				}
			}
			sh.mu.Unlock()
		}
		for p, was := range last {
			if _, ok := cur[p]; !ok {
				perShard[was.shard]++
			}
		}
		last = cur
		return perShard
	}
	divided()
	passes := [allocShards]int{}
	for r := 1; time.Duration(r)*every <= ttl; r++ {
		before := pools(a)
		now += int64(every)
		a.Tick(now)
		shards := 0
		for i, n := range divided() {
			if n == 0 {
				continue
			}
			if n != before[i] {
				t.Errorf("round %d divided %d of shard %d's %d pools: a full pass divides them all", r, n, i, before[i])
			}
			shards++
			passes[i]++
		}
		// 16 shards, 20 rounds a period: each round has one shard's
		// full pass at most.
		if shards > 1 {
			t.Errorf("round %d made %d shards' full passes at once", r, shards)
		}
	}
	for i, n := range passes {
		if n != 1 {
			t.Errorf("shard %d had %d full passes in a lease period, want 1", i, n)
		}
	}
}

// pools counts each shard's pools.
func pools(a *Allocator) (n [allocShards]int) {
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		n[i] = len(sh.pools)
		sh.mu.Unlock()
	}
	return n
}
