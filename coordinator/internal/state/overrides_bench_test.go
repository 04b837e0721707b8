package state

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
)

// BenchmarkOverridesMemory puts 1,000,000 overrides in commands of
// 10,000 and reports the heap each costs a member's state (B/override),
// and the time per override applied.
func BenchmarkOverridesMemory(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		b.StopTimer()
		f := overridesMachine(&testing.T{})
		cmds := make([]*fsmpb.OverridesCommand, 0, n/MaxOverridesPerCommand)
		for c := 0; c < n/MaxOverridesPerCommand; c++ {
			cmd := &fsmpb.OverridesCommand{NowUnixNano: hour0.UnixNano()}
			for i := range MaxOverridesPerCommand {
				cmd.Put = append(cmd.Put, &allotpb.Override{Rule: "plan-quota", Tenant: fmt.Sprintf("tenant-%07d", c*MaxOverridesPerCommand+i), Limit: int64(1000 + i)})
			}
			cmds = append(cmds, cmd)
		}
		before := heap()
		start := time.Now()
		b.StartTimer()
		for _, cmd := range cmds {
			if err, ok := f.st.Apply(CmdOverrides, cmd).(error); ok {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		took := time.Since(start)
		cmds = nil
		after := heap()
		if f.st.OverridesCount() != n {
			b.Fatalf("%d overrides", f.st.OverridesCount())
		}
		b.ReportMetric(float64(after-before)/n, "B/override")
		b.ReportMetric(float64(took.Nanoseconds())/n, "ns/override")
		runtime.KeepAlive(f)
		b.StartTimer()
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
