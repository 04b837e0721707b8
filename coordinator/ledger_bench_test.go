package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	allotpb "github.com/allot-io/allot/proto"
)

// BenchmarkExportLedger pages through a ledger of 200,000 lines (20
// hourly windows × 10,000 tenants) 1,000 lines a page, as a billing job
// exporting it does. One op of "all" is the full export, 200 pages; one op
// of "tenant" is one tenant's lines over every window, one page.
//
//	go test -run '^$' -bench ExportLedger -benchtime 10x ./coordinator
func BenchmarkExportLedger(b *testing.B) {
	f := testFSM()
	f.Apply(entry(b, 1, state.CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	const windows, tenants = 20, 10_000
	for w := 0; w < windows; w++ {
		fillLedger(b, f, uint64(2+w), tenants, "eu-west", hour0.Add(time.Duration(w)*time.Hour))
	}
	c := &Coordinator{fsm: f}
	export := func(b *testing.B, q *allotpb.UsageQuery) (lines, pages int) {
		for {
			resp, err := c.queryUsage(context.Background(), q)
			if err != nil {
				b.Fatal(err)
			}
			lines += len(resp.GetRecords())
			pages++
			if resp.GetNextPageToken() == "" {
				return lines, pages
			}
			q.PageToken = resp.GetNextPageToken()
		}
	}
	for _, tc := range []struct {
		name   string
		tenant string
		lines  int
	}{{"all", "", windows * tenants}, {"tenant", "tenant-0004321", windows}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			pages := 0
			for i := 0; i < b.N; i++ {
				n, p := export(b, &allotpb.UsageQuery{PageSize: 1000, Tenant: tc.tenant})
				if n != tc.lines {
					b.Fatalf("exported %d lines, want %d", n, tc.lines)
				}
				pages += p
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pages), "ns/page")
		})
	}
}
