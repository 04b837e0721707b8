package agent

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/clusterclient"
	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// BenchmarkRoute measures what routing by slot costs an agent: the
// router of a real reporter (newRouter over clusterclient clients) sends
// one report cycle — K keys' demand and a usage batch of T tenants — to a
// region of G groups with the slots split evenly, against fake groups
// that answer at once (an interceptor answers each call without
// dialling). groups=1 is a region never split, as today. One op is one
// report cycle, in steady state: the map held, every part acknowledged,
// no lease re-sent. It reports the reports sent and their bytes
// (proto.Size, taken in the warm-up) per cycle, the process's CPU time
// per cycle (user and system, with the router's goroutines and the
// garbage collector), and each over groups=1's (x1-...). Not in the CPU
// time: the reporter's own work before routing (collecting the keys),
// the same for every G, and the encoding of the requests on the wire,
// which goes with the bytes.
//
//	go test -run '^$' -bench Route -benchtime 20000x ./agent
func BenchmarkRoute(b *testing.B) {
	const keys = 1000
	var base routeCost
	for _, groups := range []int{1, 2, 4, 16} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			c := benchRoute(b, groups, keys)
			if groups == 1 {
				base = c
			}
			if base.cpu > 0 {
				b.ReportMetric(c.reports/base.reports, "x1-reports")
				b.ReportMetric(c.bytes/base.bytes, "x1-bytes")
				b.ReportMetric(c.cpu/base.cpu, "x1-cpu")
			}
		})
	}
}

// routeCost is one cycle's cost: reports, bytes and CPU nanoseconds.
type routeCost struct{ reports, bytes, cpu float64 }

// fakeGroups answers a region's reports and map requests in-process.
type fakeGroups struct {
	m       *shard.Map // nil: never split
	pm      *allotpb.ShardMap
	check   atomic.Bool // size and verify each report (warm-up only)
	reports atomic.Int64
	bytes   atomic.Int64
	errs    atomic.Int64
}

const fakeScheme = "passthrough:///fake-"

// intercept answers a call to a fake group: target fake-<group>.
func (f *fakeGroups) intercept(_ context.Context, method string, req, reply any, cc *grpc.ClientConn, _ grpc.UnaryInvoker, _ ...grpc.CallOption) error {
	group := strings.TrimPrefix(cc.Target(), fakeScheme)
	switch method {
	case allotpb.AgentService_Report_FullMethodName:
		in, out := req.(*allotpb.ReportRequest), reply.(*allotpb.ReportResponse)
		f.reports.Add(1)
		if f.check.Load() {
			f.bytes.Add(int64(proto.Size(in)))
			if !f.routed(group, in) {
				f.errs.Add(1)
			}
		}
		out.Protocol, out.Epoch, out.Group = allotpb.ProtocolVersion_PROTOCOL_VERSION_1, 1, group
		out.AckedSeq, out.RenewUnixNano = in.GetUsage().GetSeq(), time.Now().Add(5*time.Second).UnixNano()
		out.ReportIntervalNano = int64(time.Second)
		if f.m != nil {
			out.ShardMapVersion = f.m.Version
		}
		return nil
	case allotpb.ShardService_GetShardMap_FullMethodName:
		if f.pm == nil {
			return status.Error(codes.FailedPrecondition, "never split")
		}
		proto.Merge(reply.(*allotpb.ShardMap), f.pm)
		return nil
	}
	return status.Errorf(codes.Unimplemented, "fake group: %s", method)
}

// routed reports whether every count and key of a report belongs to the
// group it reached.
func (f *fakeGroups) routed(group string, in *allotpb.ReportRequest) bool {
	if f.m == nil {
		return group == shard.DefaultGroup
	}
	if in.GetGroup() != group {
		return false
	}
	for _, c := range in.GetUsage().GetCounts() {
		if f.m.Route(c.GetTenant()) != group {
			return false
		}
	}
	for _, d := range in.GetDemand() {
		if f.m.Route(d.GetTenant()) != group {
			return false
		}
	}
	return true
}

// fakeRegion is a map of groups main, g1.. owning even shares of the
// slots (nil for one group).
func fakeRegion(b *testing.B, groups int) *shard.Map {
	if groups == 1 {
		return nil
	}
	m := shard.Single(shard.DefaultGroup, []string{fakeScheme + shard.DefaultGroup})
	m.Version = 1 + uint64(groups)
	per := shard.Slots / groups
	for g := 1; g < groups; g++ {
		id := fmt.Sprintf("g%d", g)
		m.Groups[id] = []string{fakeScheme + id}
		if err := m.Assign(shard.Slot(g*per), shard.Slot((g+1)*per-1), id); err != nil {
			b.Fatal(err)
		}
	}
	return m
}

// routeTenants are 64 tenants, four in each sixteenth of the slots, in
// turn, so consecutive keys spread evenly over 1, 2, 4 or 16 groups.
func routeTenants() []string {
	const parts, each = 16, 4
	by := make([][]string, parts)
	for i, full := 0, 0; full < parts; i++ {
		t := fmt.Sprintf("tenant-%d", i)
		p := int(shard.Of(t)) * parts / shard.Slots
		if len(by[p]) < each {
			by[p] = append(by[p], t)
			if len(by[p]) == each {
				full++
			}
		}
	}
	var out []string
	for i := 0; i < each; i++ {
		for p := 0; p < parts; p++ {
			out = append(out, by[p][i])
		}
	}
	return out
}

func benchRoute(b *testing.B, groups, keys int) routeCost {
	f := &fakeGroups{m: fakeRegion(b, groups)}
	if f.m != nil {
		f.pm = f.m.Proto()
	}
	home := clusterclient.New([]string{fakeScheme + shard.DefaultGroup}, []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(f.intercept),
	})
	defer home.Close()
	r := newRouter(home, hclog.NewNullLogger(), func(string) bool { return false })

	tenants := routeTenants()
	req := &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: "gw-1", Incarnation: 7, Region: "eu",
		IntervalNano: int64(time.Second), Usage: &allotpb.UsageBatch{},
	}
	admitted := map[string]uint64{}
	for k := 0; k < keys; k++ {
		t := tenants[k%len(tenants)]
		req.Demand = append(req.Demand, &allotpb.KeyDemand{Rule: "api", Key: fmt.Sprintf("%s/user-%d", t, k), Tenant: t, Admitted: 40, Denied: 10, Held: 50, HeldEpoch: 1, HeldSeq: 1})
		admitted[t] += 40
	}
	for _, t := range tenants {
		req.Usage.Counts = append(req.Usage.Counts, &allotpb.UsageCount{Rule: "api", Tenant: t, WindowUnix: time.Now().Unix(), Admitted: admitted[t]})
	}
	seq := uint64(0)
	cycle := func() {
		seq++
		req.Usage.Seq, req.SentUnixNano = seq, time.Now().UnixNano()
		resp, err := r.Report(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		if resp.GetAckedSeq() != seq {
			b.Fatalf("cycle %d acknowledged %d", seq, resp.GetAckedSeq())
		}
	}
	// Warm up: the first cycle learns the map (the fake home group takes
	// it all); the next two are checked for their routing, and the last,
	// in steady state, sized: every cycle after it sends the same bytes
	// but for a varint or two.
	cycle()
	f.check.Store(true)
	cycle()
	f.bytes.Store(0)
	cycle()
	f.check.Store(false)
	bytes := float64(f.bytes.Load())
	if f.errs.Load() > 0 || f.reports.Load() != 1+2*int64(groups) {
		b.Fatalf("warm-up: %d reports, %d of them reached a group that does not own all they carried (or named another group); want %d reports, each to its owner", f.reports.Load(), f.errs.Load(), 1+2*groups)
	}
	f.reports.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for range b.N {
		cycle()
	}
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	n := float64(b.N)
	c := routeCost{reports: float64(f.reports.Load()) / n, bytes: bytes, cpu: float64(cpu.Nanoseconds()) / n}
	b.ReportMetric(c.reports, "reports/op")
	b.ReportMetric(c.bytes, "bytes/op")
	b.ReportMetric(c.cpu, "cpu-ns/op")
	return c
}

// processCPU is the CPU time this process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
