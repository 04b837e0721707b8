package coordinator

import (
	"math"
	"testing"
	"time"

	allotpb "github.com/allot-io/allot/proto"
)

// TestLedgerSaturates: ledger totals stop at the largest count instead of
// wrapping around to a small one.
func TestLedgerSaturates(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, cmdSettings, &allotpb.SettingsCommand{BillingWindowNano: int64(time.Hour)}))
	f.Apply(entry(t, 2, cmdReports, usageCmd(hour0, "gw-1", 1, 1, "acme", math.MaxUint64-10, math.MaxUint64-1)))
	f.Apply(entry(t, 3, cmdReports, usageCmd(hour0, "gw-2", 1, 1, "acme", 100, 3)))
	if a, d := ledgerTotal(f, "acme"); a != math.MaxUint64 || d != math.MaxUint64 {
		t.Fatalf("ledger %d admitted, %d denied; want both saturated at %d", a, d, uint64(math.MaxUint64))
	}
}
