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

// BenchmarkRoundsManyKeys is a lease period of rounds on a leader that
// holds many keys: a per-user rule's pools, each reported by two of 20
// nodes, and between two rounds one node's report (a twentieth of the
// keys) folded in, as a fleet's reports arrive over an interval. One op
// is one lease period (5 s, 20 rounds of 250 ms); max-round-ms is the
// longest round in it, the time a report that waits for its round may
// wait on top of the round interval.
//
//	go test -run '^$' -bench RoundsManyKeys -benchtime 3x ./coordinator/allocator
func BenchmarkRoundsManyKeys(b *testing.B) {
	for _, keys := range []int{100_000, 400_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			benchRounds(b, keys)
		})
	}
}

func benchRounds(b *testing.B, keys int) {
	const (
		nodes = 20
		ttl   = 5 * time.Second
		every = 250 * time.Millisecond
	)
	a := New(Config{Region: "eu", ReportInterval: time.Second, LeaseTTL: ttl})
	set, err := rules.NewSet(1, []rules.Rule{{
		Name: "per-user", Scope: rules.User, Algorithm: algo.GCRA, Limit: 100, Period: time.Second, Burst: 10,
		Intent: lease.Capacity,
	}})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC).UnixNano()
	a.Lead(1, now, 0)
	a.SetRules(set)
	reqs := make([]*allotpb.ReportRequest, nodes)
	for n := range reqs {
		reqs[n] = &allotpb.ReportRequest{Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: fmt.Sprintf("gw-%d", n),
			Incarnation: uint64(n + 1), Region: "eu", IntervalNano: int64(time.Second)}
	}
	for k := range keys {
		for _, n := range []int{k % nodes, (k*7 + 3) % nodes} {
			reqs[n].Demand = append(reqs[n].Demand, &allotpb.KeyDemand{Rule: "per-user", Key: fmt.Sprintf("t%d/u%d", k%10_000, k),
				Tenant: fmt.Sprintf("t%d", k%10_000), Admitted: 5, Held: 5})
		}
	}
	next := 0
	var worst time.Duration
	period := func() {
		for range ttl / every {
			r := reqs[next%nodes]
			next++
			r.SentUnixNano = now
			a.answer(a.fold(r, now), now)
			start := time.Now()
			a.Tick(now)
			worst = max(worst, time.Since(start))
			now += int64(every)
		}
	}
	period() // every pool made
	period()
	worst = 0
	b.ResetTimer()
	for range b.N {
		period()
	}
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-round-ms")
}
