package fsm

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	allotpb "github.com/allot-io/allot/proto"
)

var hour0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// bigFSM is an FSM whose ledger has windows × tenants lines, applied as
// agents' reports are.
func bigFSM(tb testing.TB, windows, tenants int) *FSM {
	tb.Helper()
	f := testFSM()
	f.Apply(entry(tb, 1, state.CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	for w := range windows {
		at := hour0.Add(time.Duration(w) * time.Hour)
		cmd := &fsmpb.ReportsCommand{ProposedUnixNano: at.UnixNano()}
		for i := 0; i < tenants; {
			b := &allotpb.UsageBatch{Seq: 1, CutUnixNano: at.UnixNano()}
			for ; i < tenants && len(b.Counts) < 10_000; i++ {
				b.Counts = append(b.Counts, &allotpb.UsageCount{Rule: "plan-quota", Tenant: fmt.Sprintf("tenant-%07d", i), WindowUnix: at.Unix(), Admitted: uint64(i + 1)})
			}
			cmd.Reports = append(cmd.Reports, &fsmpb.AgentUsage{Node: fmt.Sprintf("gw-%d-%d", w, i), Incarnation: 1, Region: "eu-west", Batch: b})
		}
		f.Apply(entry(tb, uint64(2+w), state.CmdReports, cmd))
	}
	return f
}

// discardSink is a raft.SnapshotSink that keeps nothing.
type discardSink struct{}

func (discardSink) Write(p []byte) (int, error) { return len(p), nil }
func (discardSink) ID() string                  { return "discard" }
func (discardSink) Cancel() error               { return nil }
func (discardSink) Close() error                { return nil }

var _ io.Writer = discardSink{}

// BenchmarkSnapshot takes and persists a snapshot of a ledger of 200,000
// lines, as Raft and a backup do; lock-ns/op is the part that holds the
// FSM's lock (Snapshot), which Raft's Apply waits for.
//
//	go test -run '^$' -bench 'Snapshot|ApplyDuringSnapshot' -benchtime 20x ./coordinator/internal/fsm
func BenchmarkSnapshot(b *testing.B) {
	f := bigFSM(b, 20, 10_000)
	b.ResetTimer()
	var locked time.Duration
	for range b.N {
		start := time.Now()
		snap, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		locked += time.Since(start)
		if err := snap.Persist(discardSink{}); err != nil {
			b.Fatal(err)
		}
		snap.Release()
	}
	b.ReportMetric(float64(locked.Nanoseconds())/float64(b.N), "lock-ns/op")
}

// BenchmarkApplyDuringSnapshot applies one report entry (one agent, ten
// lines) at a time while another goroutine snapshots the same 200,000-line
// ledger over and over, as Raft's apply does while a snapshot or backup
// runs; p99-ns and max-ns are the apply latencies.
func BenchmarkApplyDuringSnapshot(b *testing.B) {
	f := bigFSM(b, 20, 10_000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			snap, err := f.Snapshot()
			if err != nil {
				panic(err)
			}
			if err := snap.Persist(discardSink{}); err != nil {
				panic(err)
			}
			snap.Release()
		}
	}()
	at := hour0.Add(19 * time.Hour)
	entries := make([][]byte, b.N)
	for i := range entries {
		bt := &allotpb.UsageBatch{Seq: uint64(i + 1), CutUnixNano: at.UnixNano()}
		for j := range 10 {
			bt.Counts = append(bt.Counts, &allotpb.UsageCount{Rule: "plan-quota", Tenant: fmt.Sprintf("tenant-%07d", (i*10+j)%10_000), WindowUnix: at.Unix(), Admitted: 1})
		}
		entries[i] = entry(b, 0, state.CmdReports, &fsmpb.ReportsCommand{ProposedUnixNano: at.UnixNano(), Reports: []*fsmpb.AgentUsage{
			{Node: "gw-bench", Incarnation: 1, Region: "eu-west", Batch: bt}}}).Data
	}
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		f.Apply(rawEntry(uint64(100+i), entries[i]))
		lat[i] = time.Since(start)
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns")
}
