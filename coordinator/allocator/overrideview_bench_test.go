package allocator

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// BenchmarkOverrideViewMemory reports what the leader's copy of
// 1,000,000 overrides (the allocator's view) costs, on top of the
// replicated state's (BenchmarkOverridesMemory in the state package).
func BenchmarkOverrideViewMemory(b *testing.B) {
	const n = 1_000_000
	st := state.New()
	st.Apply(state.CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{{Name: "plan-quota", Scope: "tenant", Algorithm: "gcra", Limit: 100, Period: durationpb.New(time.Second), Intent: "quota"}}})
	for c := 0; c < n/state.MaxOverridesPerCommand; c++ {
		cmd := &fsmpb.OverridesCommand{}
		for i := range state.MaxOverridesPerCommand {
			cmd.Put = append(cmd.Put, &allotpb.Override{Rule: "plan-quota", Tenant: fmt.Sprintf("tenant-%07d", c*state.MaxOverridesPerCommand+i), Limit: 1000})
		}
		if err, ok := st.Apply(state.CmdOverrides, cmd).(error); ok {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		b.StopTimer()
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		before := m.HeapAlloc
		var v overrideView
		start := time.Now()
		v.sync(st.View())
		took := time.Since(start)
		runtime.GC()
		runtime.ReadMemStats(&m)
		if len(v.m) != n {
			b.Fatalf("%d in the view", len(v.m))
		}
		b.ReportMetric(float64(m.HeapAlloc-before)/n, "B/override")
		b.ReportMetric(float64(took.Nanoseconds())/n, "ns/override")
		runtime.KeepAlive(&v)
		b.StartTimer()
	}
}
