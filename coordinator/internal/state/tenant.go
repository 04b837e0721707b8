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

// IsFinal reports whether the window starting at w (Unix seconds) is
// final: its lines never change again, though an export or retention may
// drop them.
func (s *State) IsFinal(w int64) bool { return s.final.Has(w) }

// FinalIn counts the final windows starting in [from, to), and returns
// the last one's start (from − 1 when there is none). Windows only become
// final (retention forgets the oldest, past any range a balance counts),
// so the same count over a range means the same windows.
func (s *State) FinalIn(from, to int64) (n int, last int64) {
	last = from - 1
	s.final.AscendRange(from, to, func(w int64) bool { n, last = n+1, w; return true })
	return n, last
}

// OpenIn calls fn for each open window starting in [from, to), by start.
// Besides final windows, these are the only ones that hold lines: a line
// is added to a window only as the window is opened (addUsage), and it is
// closed only as it becomes final. A seek per open window: their
// reporters are passed over, not read.
func (s *State) OpenIn(from, to int64, fn func(w int64)) {
	w := from
	for w < to {
		next, ok := int64(0), false
		s.open.AscendGreaterOrEqual(openItem{window: w, marker: true}, func(it openItem) bool {
			if !it.marker {
				return true // a reporter of a window without its marker: not expected
			}
			next, ok = it.window, true
			return false
		})
		if !ok || next >= to {
			return
		}
		fn(next)
		if next == math.MaxInt64 {
			return
		}
		w = next + 1
	}
}
