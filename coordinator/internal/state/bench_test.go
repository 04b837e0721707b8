package state

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
)

// BenchmarkLedgerRecordSize measures what one ledger line costs: heap
// bytes on a member (the map entry, its counts, its key's strings and its
// place in the index), the index's part of that, and bytes in a snapshot
// (and so in a backup). The ledger is 100,000 lines: 1,000 tenants
// ("tenant-0000123") × 4 rules × 25 hourly windows, in one region, applied
// through the FSM as agents' reports are. docs/billing.md sizes the
// retention with these figures.
//
//	go test -run '^$' -bench LedgerRecordSize -benchtime 3x ./coordinator/internal/state
func BenchmarkLedgerRecordSize(b *testing.B) {
	const tenants, windows = 1000, 25
	ruleNames := []string{"plan-quota", "api-rate", "search", "uploads"}
	records := tenants * len(ruleNames) * windows
	heapInUse := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var heap, snap float64
	for i := 0; i < b.N; i++ {
		before := heapInUse()
		f := testFSM()
		f.Apply(entry(b, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
		for w := 0; w < windows; w++ {
			at := hour0.Add(time.Duration(w) * time.Hour)
			batch := &allotpb.UsageBatch{Seq: 1, CutUnixNano: at.UnixNano()}
			for t := 0; t < tenants; t++ {
				for _, r := range ruleNames {
					batch.Counts = append(batch.Counts, &allotpb.UsageCount{Rule: r, Tenant: fmt.Sprintf("tenant-%07d", t), WindowUnix: at.Unix(), Admitted: uint64(1000 + t), Denied: uint64(t % 7)})
				}
			}
			f.Apply(entry(b, uint64(2+w), CmdReports, &fsmpb.ReportsCommand{ProposedUnixNano: at.UnixNano(), Reports: []*fsmpb.AgentUsage{
				{Node: fmt.Sprintf("gw-%d", w), Incarnation: 1, Region: "eu-west", Batch: batch},
			}}))
		}
		// Incarnations and windows are a few; nearly all of it is the
		// ledger.
		heap += float64(heapInUse()-before) / float64(records)

		var sink bytes.Buffer
		if err := f.st.Snapshot().Write(&sink); err != nil {
			b.Fatal(err)
		}
		snap += float64(sink.Len()) / float64(records)
		runtime.KeepAlive(f)
	}
	b.ReportMetric(heap/float64(b.N), "heap-B/line")
	b.ReportMetric(snap/float64(b.N), "snapshot-B/line")
}

// BenchmarkExportedDrop measures what a member spends applying the export
// positions of a ledger exported in batches of 10,000: 100,000 final
// lines (25,000 tenants × 4 rules in one window) dropped batch by batch,
// as every member does under the state machine's lock while reports
// wait. ns/line is the figure to read.
//
//	go test -run '^$' -bench ExportedDrop ./coordinator/internal/state
func BenchmarkExportedDrop(b *testing.B) {
	const tenants, batchLines = 25_000, 10_000
	ruleNames := []string{"rule-0", "rule-1", "rule-2", "rule-3"}
	fill := func() *machine {
		f := testFSM()
		f.Apply(entry(b, 1, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Second)}))
		batch := &allotpb.UsageBatch{Seq: 1, CutUnixNano: hour0.UnixNano()}
		for t := range tenants {
			for _, r := range ruleNames {
				batch.Counts = append(batch.Counts, &allotpb.UsageCount{Rule: r, Tenant: fmt.Sprintf("tenant-%06d", t), WindowUnix: hour0.Unix(), Admitted: 1})
			}
		}
		f.Apply(entry(b, 2, CmdReports, &fsmpb.ReportsCommand{ProposedUnixNano: hour0.UnixNano(), Reports: []*fsmpb.AgentUsage{
			{Node: "gw-1", Incarnation: 1, Region: "default", Batch: batch},
		}}))
		// The window is final once its reporter reported past its end.
		f.Apply(entry(b, 3, CmdReports, usageCmd(hour0.Add(2*time.Second), "gw-1", 1, 2, "tenant-000000", 1, 0)))
		f.Apply(entry(b, 4, CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: hour0.Add(3 * time.Second).UnixNano(), AgentTimeoutNano: int64(time.Minute)}))
		return f
	}
	lines := 0
	for b.Loop() {
		b.StopTimer()
		f := fill()
		var cmds [][]byte
		pos := ledger.Position{}
		for page := f.st.ExportPage(batchLines); len(page) > 0; page = f.st.ExportPageAfter(pos, batchLines) {
			pos = pos.Advance(page)
			data, err := Encode(CmdExported|Ignorable, &fsmpb.ExportedCommand{Position: PositionProto(pos)})
			if err != nil {
				b.Fatal(err)
			}
			cmds = append(cmds, data)
			lines += len(page)
		}
		if len(cmds) != tenants*len(ruleNames)/batchLines {
			b.Fatalf("%d batches, want %d", len(cmds), tenants*len(ruleNames)/batchLines)
		}
		b.StartTimer()
		for _, data := range cmds {
			f.Apply(data)
		}
		b.StopTimer()
		if n := f.st.LedgerLen(); n != 1 {
			b.Fatalf("%d lines left, want the open window's 1", n)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(lines), "ns/line")
}
