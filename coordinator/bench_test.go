package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// BenchmarkLeaderLoad is the coordinator's load test: agents reporting M
// active keys each against one real leader over loopback gRPC, with a
// usage batch in every report (so every report also waits for a Raft
// commit). One op is one report. It reports what the leader sustained —
// reports/s and key entries/s — and the report-to-lease round trip.
//
// The agents run in the same process on the same two cores, so the
// figures are a lower bound for a leader with the machine to itself.
//
//	go test -run '^$' -bench LeaderLoad -benchtime 20000x ./coordinator
func BenchmarkLeaderLoad(b *testing.B) {
	for _, tc := range []struct{ agents, keys int }{{16, 100}, {16, 1000}, {32, 4000}} {
		b.Run(fmt.Sprintf("agents=%d/keys=%d", tc.agents, tc.keys), func(b *testing.B) {
			benchLeader(b, tc.agents, tc.keys)
		})
	}
}

func benchLeader(b *testing.B, agents, keys int) {
	cfg := Config{
		NodeID: "bench", DataDir: b.TempDir(), Bootstrap: true,
		RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		ReportInterval: time.Second, ApplyWindow: 10 * time.Millisecond,
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		MaxReportKeys: 1 << 20, MaxReportBytes: 64 << 20,
	}
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer stop(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitLeader(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := c.applyRulesCommand(context.Background(), &fsmpb.RulesCommand{Put: []*allotpb.Rule{
		{Name: "api", Scope: "user", Algorithm: "gcra", Limit: 100, Period: durationpb.New(time.Second), Burst: 20, Intent: "capacity"},
	}}); err != nil {
		b.Fatal(err)
	}
	conn, err := grpc.NewClient(c.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := allotpb.NewAgentServiceClient(conn)

	// Each agent reports its own slice of a shared key space, overlapping
	// its neighbour's, so keys have more than one node.
	reqs := make([]*allotpb.ReportRequest, agents)
	for a := range reqs {
		r := &allotpb.ReportRequest{Node: fmt.Sprintf("gw-%d", a), Incarnation: uint64(a + 1), Region: "eu", IntervalNano: int64(time.Second)}
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("tenant-%d/user-%d", (a*keys/2+k)%5000, a*keys/2+k)
			r.Demand = append(r.Demand, &allotpb.KeyDemand{Rule: "api", Key: key, Tenant: "t", Admitted: 40, Denied: 10, Held: 50})
		}
		r.Usage = &allotpb.UsageBatch{Counts: []*allotpb.UsageCount{{Rule: "api", Tenant: "t", WindowUnix: time.Now().Unix(), Admitted: 40 * uint64(keys)}}}
		reqs[a] = r
	}
	var next atomic.Int64
	lat := make([][]time.Duration, agents)
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for a := 0; a < agents; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := uint64(0)
			req := reqs[a]
			index := make(map[string]*allotpb.KeyDemand, len(req.Demand))
			for _, d := range req.Demand {
				index[d.Key] = d
			}
			for next.Add(1) <= int64(b.N) {
				seq++
				req.Usage.Seq = seq
				t0 := time.Now()
				resp, err := client.Report(context.Background(), req)
				if err != nil {
					b.Error(err)
					return
				}
				lat[a] = append(lat[a], time.Since(t0))
				// Hold what was granted, as an agent would, so that
				// unchanged leases are renewed rather than re-sent.
				for _, l := range resp.GetLeases() {
					d := index[l.GetKey()]
					d.Held, d.HeldEpoch, d.HeldSeq = l.GetLimit(), l.GetEpoch(), l.GetSeq()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "reports/s")
	b.ReportMetric(float64(len(all)*keys)/elapsed.Seconds(), "keys/s")
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}
