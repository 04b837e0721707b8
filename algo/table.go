package algo

import "math/bits"

// entry is one subject in a keyed table: a 128-bit keyed hash of the key and
// the subject's state. It holds no pointers, so a table of ten million
// entries is invisible to the garbage collector's marking.
//
// The key itself is not stored. Two keys share state only if both 64-bit
// halves of their hashes, drawn with independent random seeds per table,
// collide: with n = 10⁷ live keys the chance that any pair does is about
// n²/2¹²⁹ ≈ 10⁻²⁵, and an attacker who does not know the seeds cannot aim
// for it.
type entry struct {
	h1, h2 uint64 // h1|h2 == 0 marks an empty slot
	s      state
}

func (e *entry) empty() bool { return e.h1|e.h2 == 0 }

// table is an open-addressing hash table with linear probing and
// backward-shift deletion (no tombstones). Its capacity is any size, not a
// power of two: a slot is chosen by multiplying the hash into the range,
// and the table grows by half when it is three-quarters full. Between
// growths the load stays in [½, ¾], so each key costs 32/¾ ≈ 43 to 32/½ =
// 64 bytes, and a lookup reads 2.5 slots on average, usually one cache line.
type table struct {
	slots []entry
	n     int // occupied slots
}

const (
	minTableSize = 8
	maxLoadNum   = 3 // grow above 3/4 full
	maxLoadDen   = 4
)

// home returns the slot a hash would occupy with no collisions.
func (t *table) home(h1 uint64) int {
	hi, _ := bits.Mul64(h1, uint64(len(t.slots)))
	return int(hi)
}

// find returns the slot holding (h1, h2) and true, or the empty slot where
// it would be inserted and false. The table must have an empty slot.
func (t *table) find(h1, h2 uint64) (int, bool) {
	i := t.home(h1)
	for {
		e := &t.slots[i]
		if e.h1 == h1 && e.h2 == h2 {
			return i, true
		}
		if e.empty() {
			return i, false
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// needsGrowth reports whether inserting one more entry would overfill t.
func (t *table) needsGrowth() bool {
	return len(t.slots) == 0 || (t.n+1)*maxLoadDen > len(t.slots)*maxLoadNum
}

// grow rehashes t into a table half as large again.
func (t *table) grow() {
	old := t.slots
	t.slots = make([]entry, max(len(old)+len(old)/2, minTableSize))
	for i := range old {
		if e := &old[i]; !e.empty() {
			j, _ := t.find(e.h1, e.h2)
			t.slots[j] = *e
		}
	}
}

// remove empties slot i, shifting later entries of the same probe run back
// so that every remaining entry is still found from its home slot.
func (t *table) remove(i int) {
	size := len(t.slots)
	j := i
	for {
		if j++; j == size {
			j = 0
		}
		e := &t.slots[j]
		if e.empty() {
			break
		}
		// e may move to i unless its home lies cyclically in (i, j].
		k := t.home(e.h1)
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		t.slots[i] = *e
		i = j
	}
	t.slots[i] = entry{}
	t.n--
}
