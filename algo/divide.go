package algo

import "math/bits"

// divider divides non-negative int64 values by a fixed positive divisor
// with two multiplications instead of a hardware division, which costs
// several times as much on the hot path. The quotient is exact: the
// reciprocal's estimate is at most one below the true quotient (see
// Granlund and Montgomery, "Division by Invariant Integers using
// Multiplication"), and one comparison corrects it.
type divider struct {
	d uint64
	m uint64 // ⌊(2⁶⁴−1)/d⌋
}

func newDivider(d int64) divider {
	return divider{d: uint64(d), m: ^uint64(0) / uint64(d)}
}

// div returns ⌊n/d⌋ for n ≥ 0.
func (v divider) div(n int64) int64 {
	q, _ := bits.Mul64(uint64(n), v.m)
	if uint64(n)-q*v.d >= v.d {
		q++
	}
	return int64(q)
}
