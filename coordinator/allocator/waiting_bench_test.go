package allocator

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/protobuf/proto"
)

// BenchmarkWaitingReportMemory is the heap a report holds while it waits
// for its round, after its demand was folded in: a leader behind on its
// rounds holds as many as its in-flight bound takes (intake.Bound), and
// their memory is the leader's peak. 100 nodes' reports of 1,456 keys
// each (the fleet's shape at 100 gateways × 2,000 tenants: make fleet),
// decoded from the wire as gRPC decodes them, folded into pools that
// exist, then kept as the handlers keep them until the round.
// retained-B/report is what one such report keeps reachable;
// decoded-B/report is the decoded request, for scale.
//
//	go test -run '^$' -bench WaitingReportMemory -benchtime 5x ./coordinator/allocator
func BenchmarkWaitingReportMemory(b *testing.B) {
	const (
		nodes = 100
		keys  = 1456
	)
	a := New(Config{Region: "eu", ReportInterval: time.Second, LeaseTTL: 5 * time.Second})
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
	wire := make([][]byte, nodes)
	for n := range wire {
		req := &allotpb.ReportRequest{Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: fmt.Sprintf("gw-%d", n),
			Incarnation: uint64(n + 1), Region: "eu", IntervalNano: int64(time.Second), SentUnixNano: now}
		for k := range keys {
			u := (n*keys/2 + k) % (nodes * keys / 2) // each key reported by two nodes
			req.Demand = append(req.Demand, &allotpb.KeyDemand{Rule: "per-user", Key: fmt.Sprintf("t%d/u%d", u%2000, u),
				Tenant: fmt.Sprintf("t%d", u%2000), Admitted: 5, Held: 5})
		}
		if wire[n], err = proto.Marshal(req); err != nil {
			b.Fatal(err)
		}
	}
	decode := func() []*allotpb.ReportRequest {
		reqs := make([]*allotpb.ReportRequest, nodes)
		for n := range reqs {
			reqs[n] = &allotpb.ReportRequest{}
			if err := proto.Unmarshal(wire[n], reqs[n]); err != nil {
				b.Fatal(err)
			}
		}
		return reqs
	}
	round := func(folded []*Folded) {
		a.Tick(now)
		for _, f := range folded {
			a.answer(f, now)
		}
		now += int64(time.Second)
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for range 2 { // every pool and claim made
		var folded []*Folded
		for _, r := range decode() {
			folded = append(folded, a.fold(r, now))
		}
		round(folded)
	}
	var retained, decoded uint64
	b.ResetTimer()
	for range b.N {
		base := heap()
		reqs := decode()
		decoded += heap() - base
		folded := make([]*Folded, 0, nodes)
		for i, r := range reqs {
			folded = append(folded, a.fold(r, now))
			reqs[i] = nil // the handler keeps the report no longer
		}
		retained += heap() - base
		round(folded)
	}
	b.ReportMetric(float64(retained)/float64(b.N*nodes), "retained-B/report")
	b.ReportMetric(float64(decoded)/float64(b.N*nodes), "decoded-B/report")
}
