package state

import (
	"math"

	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
)

// TenantUsage calls fn for each ledger line of tenant in the windows
// starting in [from, to) (Unix seconds), in index order: what a tenant's
// balance adds up. The tenant is bounded as agents report it.
//
// The ledger is ordered by window, then tenant: the walk seeks to the
// tenant in each window and reads its lines there, so it costs
// O(windows · log lines + the tenant's lines), whatever the other tenants
// hold. Windows start on multiples of the billing window (windowOf): when
// the tenant's lines in a window end at another tenant's, the next window
// is a billing window on, and one seek finds the tenant there; when they
// end at a later window, that is the next one the ledger holds. An hour's
// windows make a month's cycle 720 seeks (BenchmarkBalance).
func (s *State) TenantUsage(tenant string, from, to int64, fn func(rule string, window int64, admitted uint64)) {
	tenant = allotpb.BoundName(tenant)
	width := s.BillingWindowSeconds()
	w := from
	for w < to {
		var next ledger.Key
		more := false
		s.ledger.AscendGreaterOrEqual(lineItem{key: ledger.Key{Window: w, Tenant: tenant}}, func(it lineItem) bool {
			k := it.key
			if k.Window == w && k.Tenant == tenant {
				fn(k.Rule, k.Window, it.u.admitted)
				return true
			}
			next, more = k, true
			return false
		})
		switch {
		case !more:
			return
		case next.Window > w:
			w = next.Window
		case w > math.MaxInt64-width:
			return
		default:
			// The window start after w (w itself may be unaligned, as
			// from may be): floor(w / width) + 1 windows.
			q := w / width
			if w%width != 0 && w < 0 {
				q--
			}
			w = (q + 1) * width
		}
	}
}
