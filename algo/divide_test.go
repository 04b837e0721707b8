package algo

import (
	"math"
	"math/big"
	"testing"

	"pgregory.net/rapid"
)

func TestDividerExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := rapid.OneOf(rapid.Int64Range(1, 1000), rapid.Int64Range(1, math.MaxInt64)).Draw(t, "d")
		n := rapid.OneOf(rapid.Int64Range(0, 1<<20), rapid.Int64Range(0, math.MaxInt64)).Draw(t, "n")
		if got, want := newDivider(d).div(n), n/d; got != want {
			t.Fatalf("%d/%d = %d, want %d", n, d, got, want)
		}
	})
	for _, d := range []int64{1, 2, 3, 7, 1_000_000, 1_000_000_007, math.MaxInt64} {
		for _, n := range []int64{0, 1, d - 1, d, d + 1, 2*d - 1, math.MaxInt64 - 1, math.MaxInt64} {
			if n < 0 {
				continue
			}
			if got, want := newDivider(d).div(n), n/d; got != want {
				t.Errorf("%d/%d = %d, want %d", n, d, got, want)
			}
		}
	}
}

func TestWeightExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		period := rapid.OneOf(rapid.Int64Range(1, 1000), rapid.Int64Range(1, int64(maxPeriod))).Draw(t, "period")
		prev := rapid.OneOf(rapid.Uint64Range(0, 100), rapid.Uint64Range(0, maxWindowLimit)).Draw(t, "prev")
		left := rapid.Uint64Range(0, uint64(period)).Draw(t, "left")
		p := params{period: period, invPeriod: 1 / float64(period)}
		n := new(big.Int).Mul(new(big.Int).SetUint64(prev), new(big.Int).SetUint64(left))
		q, r := new(big.Int).QuoRem(n, big.NewInt(period), new(big.Int))
		if r.Sign() != 0 {
			q.Add(q, big.NewInt(1))
		}
		if got := p.weight(prev, left); got != q.Uint64() {
			t.Fatalf("weight(%d, %d) over %d = %d, want %d", prev, left, period, got, q)
		}
	})
}
