package algo

import (
	"strconv"
	"testing"
)

// TestHashHalvesSpread checks that each half of a Hash spreads typical keys
// without collisions (two million sequential keys; a 64-bit hash collides
// among them with probability about 10⁻⁷) and that Bytes and String agree.
func TestHashHalvesSpread(t *testing.T) {
	h := NewHasher()
	a := make(map[uint64]bool, 2_000_000)
	b := make(map[uint64]bool, 2_000_000)
	for i := 0; i < 2_000_000; i++ {
		key := "user-" + strconv.Itoa(i)
		if i%3 == 0 {
			key += "/route/with/a/longer/path/" + strconv.Itoa(i)
		}
		x := h.String(key)
		if x != h.Bytes([]byte(key)) {
			t.Fatalf("%q: String and Bytes differ", key)
		}
		if a[x.a] || b[x.b] {
			t.Fatalf("collision at key %q", key)
		}
		a[x.a], b[x.b] = true, true
	}
	if h.String("") == (Hash{}) {
		t.Error("the empty key hashes to the empty-slot marker")
	}
	if NewHasher().String("k") == h.String("k") {
		t.Error("two hashers share seeds")
	}
}

func TestHashBytesAllocatesNothing(t *testing.T) {
	h := NewHasher()
	key := []byte("tenant-42/user-7")
	if n := testing.AllocsPerRun(100, func() { h.Bytes(key) }); n != 0 {
		t.Errorf("Bytes allocates %v", n)
	}
}
