package coordinator

import (
	"sync"
	"weak"

	"github.com/allot-io/allot/coordinator/internal/state"
)

// finalSums remembers what a tenant used under a rule in the final
// windows of a range: the part of a balance that cannot change. A final
// window's lines never change, and windows only become final, so the sum
// stands for as long as the count of final windows in the range does; a
// balance then reads only the open windows (one or two) instead of a seek
// per window of the cycle, 720 for a month of hourly windows.
//
// It is this member's, not replicated, and answers only for the state it
// was read from: a restore swaps in another state, and the sums are
// forgotten. It holds at most maxFinalSums entries, forgotten all at once
// when full: a sum is one walk of the tenant's cycle to make again.
type finalSums struct {
	mu sync.Mutex
	// of is the state the sums were read from; weak, so that the sums do
	// not keep a replaced state's ledger in memory.
	of weak.Pointer[state.State]
	m  map[finalKey]finalSum
}

// finalKey is a tenant's rule over the windows starting in [from, to).
type finalKey struct {
	tenant, rule string
	from, to     int64
}

// finalSum is the admitted sum over the final windows of a range, how
// many final windows the range held when it was read, and the last one's
// start. Windows become final in order, mostly: when those up to through
// are still windows in number, the ones added since are all later, and
// only they are read.
type finalSum struct {
	windows int
	through int64
	used    uint64
}

const maxFinalSums = 100_000

// get returns the sum for k read from st, if one is kept.
func (f *finalSums) get(st *state.State, k finalKey) (finalSum, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.of != weak.Make(st) {
		return finalSum{}, false
	}
	v, ok := f.m[k]
	return v, ok
}

// put keeps the sum for k read from st.
func (f *finalSums) put(st *state.State, k finalKey, v finalSum) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := weak.Make(st); f.of != p || f.m == nil || len(f.m) >= maxFinalSums {
		f.of, f.m = p, make(map[finalKey]finalSum)
	}
	f.m[k] = v
}
