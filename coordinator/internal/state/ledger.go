package state

import (
	"math"
	"time"

	"github.com/allot-io/allot/ledger"
)

// The ledger: its lines in a B-tree ordered by window, tenant, rule and
// region, the order exports are paged in. Without the order every page
// scanned and sorted the whole ledger under the state machine's lock,
// which made a full export quadratic and held up Raft's apply for the
// length of each scan. With it a page costs a seek and a walk of the
// page: O(log n + page).

// MaxScanPerPage bounds how many index entries one page may pass over
// that its filters leave out (a page of a filtered query over a large
// ledger that few lines match). A page that reaches it ends early, even
// empty, with a token to continue from.
const MaxScanPerPage = 10_000

// windowEnd is the end of the billing window starting at the Unix second
// window, width ns long, in Unix ns; it saturates instead of overflowing
// for windows far in the future (logs from before windows were bounded
// accepted windows up to 2^40 s).
func windowEnd(window, width int64) int64 {
	const sec = int64(time.Second)
	if window > (math.MaxInt64-width)/sec {
		return math.MaxInt64
	}
	if window < math.MinInt64/sec {
		return math.MinInt64
	}
	return window*sec + width
}

// dropLedgerBefore deletes the final windows' lines that ended before
// cutoff (Unix ns). It walks the ledger from its oldest line and stops at the
// first window that ended at or after cutoff, so it reads only what it
// deletes and the old windows not yet final. It returns how many lines it
// deleted.
func (s *State) dropLedgerBefore(cutoff, width int64) int {
	return s.dropFinalLines(func(k ledger.Key) bool { return windowEnd(k.Window, width) < cutoff })
}

// dropFinalLines deletes the lines of final windows from the ledger's
// start for as long as within holds, and returns how many it deleted;
// lines of windows not final are kept.
//
// What it deletes is normally the ledger's first lines (an export
// position's, or retention's, all final), and it takes them off the
// front: a B-tree's minimum is found and removed without comparing a
// key, where looking each line up again costs a dozen comparisons of
// four-part keys. Every member does this under the state machine's lock,
// for every line the sink takes, while reports wait. Behind a window not
// final, the lines after it are found by a walk and removed one by one.
func (s *State) dropFinalLines(within func(ledger.Key) bool) int {
	var (
		n         int
		window    int64
		final, ok bool
	)
	isFinal := func(w int64) bool {
		if !ok || w != window {
			window, final, ok = w, s.final.Has(w), true
		}
		return final
	}
	for {
		it, any := s.ledger.Min()
		if !any || !within(it.key) || !isFinal(it.key.Window) {
			break
		}
		s.ledger.DeleteMin()
		n++
	}
	var drop []lineItem
	s.ledger.Ascend(func(it lineItem) bool {
		if !within(it.key) {
			return false
		}
		if isFinal(it.key.Window) {
			drop = append(drop, it)
		}
		return true
	})
	for _, it := range drop {
		s.ledger.Delete(it)
	}
	n += len(drop)
	s.finalLines -= n
	return n
}

// LedgerQuery selects ledger lines: windows starting in [From, To), and
// the tenant, rule and region when not empty.
type LedgerQuery struct {
	From, To             int64
	Tenant, Rule, Region string
}

func (q *LedgerQuery) matches(k ledger.Key) bool {
	return k.Window >= q.From && k.Window < q.To &&
		(q.Tenant == "" || k.Tenant == q.Tenant) && (q.Rule == "" || k.Rule == q.Rule) && (q.Region == "" || k.Region == q.Region)
}

// skip returns, for a key k the query leaves out because of its tenant,
// the next key in index order that could match: the query's tenant in the
// same window, or in the next one. For other keys it returns false: the
// walk goes on to the next key.
func (q *LedgerQuery) skip(k ledger.Key) (ledger.Key, bool) {
	if q.Tenant == "" || k.Tenant == q.Tenant {
		return ledger.Key{}, false
	}
	next := ledger.Key{Window: k.Window, Tenant: q.Tenant, Rule: q.Rule}
	if q.Rule != "" {
		next.Region = q.Region
	}
	if k.Tenant > q.Tenant {
		if k.Window == math.MaxInt64 {
			return ledger.Key{}, false
		}
		next.Window++
	}
	return next, true
}

// ledgerPage returns up to limit lines matching q, in index order, after
// the key `after` when given. more reports that there may be more to read,
// after the key next: the page is full and another line matches, or the
// page passed over `budget` keys the query leaves out (MaxScanPerPage for
// queries; each seek past a run of other tenants' keys counts as one). It
// runs under the FSM's read lock in O(log n + limit + budget).
func (s *State) ledgerPage(q LedgerQuery, after *ledger.Key, limit, budget int) (lines []lineItem, next ledger.Key, more bool) {
	start, exclusive := ledger.Key{Window: q.From}, false
	if after != nil && ledger.CompareKeys(*after, start) >= 0 {
		start, exclusive = *after, true
	}
	for {
		var seek, passed ledger.Key
		jump, stop := false, false
		s.ledger.AscendGreaterOrEqual(lineItem{key: start}, func(it lineItem) bool {
			k := it.key
			if exclusive && k == start {
				return true
			}
			if k.Window >= q.To {
				stop = true // nothing further can match
				return false
			}
			if q.matches(k) {
				if len(lines) == limit {
					next, more, stop = lines[len(lines)-1].key, true, true
					return false
				}
				lines = append(lines, it)
				return true
			}
			if budget--; budget <= 0 {
				next, more, stop = k, true, true
				return false
			}
			seek, jump = q.skip(k)
			passed = k
			return !jump
		})
		if stop || !jump {
			return lines, next, more
		}
		// A seek costs a descent of the tree: it counts against the
		// budget like a key passed over. Every key up to the one that
		// led to it has been read, so a page ending here continues
		// after that one.
		if budget--; budget <= 0 {
			return lines, passed, true
		}
		start, exclusive = seek, false
	}
}
