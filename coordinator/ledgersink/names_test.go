package ledgersink

import (
	"cmp"
	"testing"

	"pgregory.net/rapid"
)

// TestStoredNames: the escape of NUL and SOH gives back every name, keeps
// the bytewise order and holds no NUL.
func TestStoredNames(t *testing.T) {
	name := rapid.StringOfN(rapid.SampledFrom([]rune{0, 1, 2, 'a', 'z', 0x7f, 'é', 0x2400}), 0, 12, -1)
	rapid.Check(t, func(t *rapid.T) {
		a, b := name.Draw(t, "a"), name.Draw(t, "b")
		sa, sb := storeName(a), storeName(b)
		if loadName(sa) != a {
			t.Fatalf("%q is stored as %q, which loads as %q", a, sa, loadName(sa))
		}
		for i := 0; i < len(sa); i++ {
			if sa[i] == 0 {
				t.Fatalf("%q is stored with a NUL: %q", a, sa)
			}
		}
		if got, want := cmp.Compare(sa, sb), cmp.Compare(a, b); got != want {
			t.Fatalf("%q vs %q compare %d, stored as %q vs %q %d", a, b, want, sa, sb, got)
		}
	})
}
