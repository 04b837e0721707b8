package coordinator

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
)

// TestQueryUsageBoundsTheScan: a filtered query over a large ledger that
// few lines match does not read the whole ledger for one page: it stops
// after a bounded scan and returns a continuation token, even with an
// empty page; following the tokens finds every match exactly once.
func TestQueryUsageBoundsTheScan(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, state.CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	fillLedger(t, f, 2, 50_000, "eu-west", hour0)
	f.Apply(entry(t, 3, state.CmdReports, &fsmpb.ReportsCommand{ProposedUnixNano: hour0.UnixNano(), Reports: []*fsmpb.AgentUsage{{
		Node: "gw-us", Incarnation: 1, Region: "us-east", Batch: &allotpb.UsageBatch{Seq: 1, Counts: []*allotpb.UsageCount{
			{Rule: "plan-quota", Tenant: "tenant-9999999", WindowUnix: hour0.Unix(), Admitted: 7},
		}},
	}}}))
	c := &Coordinator{fsm: f}
	q := &allotpb.UsageQuery{Region: "us-east", PageSize: 10}
	first, err := c.queryUsage(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if first.GetNextPageToken() == "" {
		t.Fatalf("one page scanned all 50,001 lines for a filter only the last matches: %d records, no token", len(first.GetRecords()))
	}
	var got []*allotpb.UsageRecord
	pages := 0
	for resp := first; ; {
		pages++
		got = append(got, resp.GetRecords()...)
		if resp.GetNextPageToken() == "" {
			break
		}
		q.PageToken = resp.GetNextPageToken()
		if resp, err = c.queryUsage(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0].GetTenant() != "tenant-9999999" || got[0].GetAdmitted() != 7 {
		t.Fatalf("got %v; want the one us-east line", got)
	}
	t.Logf("found the one match in %d pages", pages)
}

// TestPageTokens: a page token decodes to the key it was made of, and
// what this coordinator did not issue is refused.
func TestPageTokens(t *testing.T) {
	for _, k := range []ledger.Key{{}, {Tenant: "acme", Rule: "plan-quota", Region: "eu-west", Window: 1795946400}, {Window: math.MinInt64}, {Tenant: "a/b c", Window: math.MaxInt64}} {
		got, err := decodePageToken(encodePageToken(k))
		if err != nil || got != k {
			t.Errorf("token for %+v decodes to %+v, %v", k, got, err)
		}
	}
	for _, tok := range []string{"garbage!", "YQ", encodePageToken(ledger.Key{})[:2]} {
		if _, err := decodePageToken(tok); err == nil {
			t.Errorf("token %q decoded", tok)
		}
	}
}
