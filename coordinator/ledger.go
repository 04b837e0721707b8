package coordinator

import (
	"cmp"
	"math"
	"time"

	"github.com/google/btree"
)

// The ledger's index: its keys in a B-tree ordered by window, tenant, rule
// and region, the order exports are paged in. Without it every page
// scanned and sorted the whole ledger under the state machine's lock,
// which made a full export quadratic and held up Raft's apply for the
// length of each scan. With it a page costs a seek and a walk of the
// page: O(log n + page).

// ledgerIndexDegree is the B-tree's degree: nodes hold up to 63 keys.
const ledgerIndexDegree = 32

// maxScanPerPage bounds how many index entries one page may pass over
// that its filters leave out (a page of a filtered query over a large
// ledger that few lines match). A page that reaches it ends early, even
// empty, with a token to continue from.
const maxScanPerPage = 10_000

func newLedgerIndex() *btree.BTreeG[ledgerKey] {
	return btree.NewG(ledgerIndexDegree, func(a, b ledgerKey) bool { return compareLedgerKeys(a, b) < 0 })
}

func compareLedgerKeys(a, b ledgerKey) int {
	return cmp.Or(cmp.Compare(a.window, b.window), cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.rule, b.rule), cmp.Compare(a.region, b.region))
}

// putLedger adds a ledger line that is not there yet, to the map and the
// index.
func (s *state) putLedger(k ledgerKey, u *usage) {
	s.ledger[k] = u
	s.index.ReplaceOrInsert(k)
}

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
// cutoff (Unix ns). It walks the index from its oldest key and stops at the
// first window that ended at or after cutoff, so it reads only what it
// deletes and the old windows not yet final.
func (s *state) dropLedgerBefore(cutoff, width int64) {
	var drop []ledgerKey
	s.index.Ascend(func(k ledgerKey) bool {
		if windowEnd(k.window, width) >= cutoff {
			return false
		}
		if s.final[k.window] {
			drop = append(drop, k)
		}
		return true
	})
	for _, k := range drop {
		s.index.Delete(k)
		delete(s.ledger, k)
	}
}

// ledgerQuery selects ledger lines: windows starting in [from, to), and
// the tenant, rule and region when not empty.
type ledgerQuery struct {
	from, to             int64
	tenant, rule, region string
}

func (q *ledgerQuery) matches(k ledgerKey) bool {
	return k.window >= q.from && k.window < q.to &&
		(q.tenant == "" || k.tenant == q.tenant) && (q.rule == "" || k.rule == q.rule) && (q.region == "" || k.region == q.region)
}

// skip returns, for a key k the query leaves out because of its tenant,
// the next key in index order that could match: the query's tenant in the
// same window, or in the next one. For other keys it returns false: the
// walk goes on to the next key.
func (q *ledgerQuery) skip(k ledgerKey) (ledgerKey, bool) {
	if q.tenant == "" || k.tenant == q.tenant {
		return ledgerKey{}, false
	}
	next := ledgerKey{window: k.window, tenant: q.tenant, rule: q.rule}
	if q.rule != "" {
		next.region = q.region
	}
	if k.tenant > q.tenant {
		if k.window == math.MaxInt64 {
			return ledgerKey{}, false
		}
		next.window++
	}
	return next, true
}

// ledgerPage returns up to limit lines matching q, in index order, after
// the key `after` when given. more reports that there may be more to read,
// after the key next: the page is full and another line matches, or the
// page passed over `budget` keys the query leaves out (maxScanPerPage for
// queries; each seek past a run of other tenants' keys counts as one). It
// runs under the FSM's read lock in O(log n + limit + budget).
func (s *state) ledgerPage(q ledgerQuery, after *ledgerKey, limit, budget int) (keys []ledgerKey, next ledgerKey, more bool) {
	start, exclusive := ledgerKey{window: q.from}, false
	if after != nil && compareLedgerKeys(*after, start) >= 0 {
		start, exclusive = *after, true
	}
	for {
		var seek, passed ledgerKey
		jump, stop := false, false
		s.index.AscendGreaterOrEqual(start, func(k ledgerKey) bool {
			if exclusive && k == start {
				return true
			}
			if k.window >= q.to {
				stop = true // nothing further can match
				return false
			}
			if q.matches(k) {
				if len(keys) == limit {
					next, more, stop = keys[len(keys)-1], true, true
					return false
				}
				keys = append(keys, k)
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
			return keys, next, more
		}
		// A seek costs a descent of the tree: it counts against the
		// budget like a key passed over. Every key up to the one that
		// led to it has been read, so a page ending here continues
		// after that one.
		if budget--; budget <= 0 {
			return keys, passed, true
		}
		start, exclusive = seek, false
	}
}
