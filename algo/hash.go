package algo

import "hash/maphash"

// Hash identifies a key inside a Keyed store: two independent 64-bit
// hashes of it. Computing it once lets a caller decide the same key under
// several stores that share a Hasher, or decide and later return cost,
// without hashing the key again.
type Hash struct {
	a, b uint64
}

// Hasher hashes keys with two secret random seeds. Stores that share a
// Hasher accept each other's Hashes. It is safe for concurrent use.
type Hasher struct {
	s1, s2 maphash.Seed
}

// NewHasher returns a Hasher with fresh random seeds.
func NewHasher() *Hasher {
	return &Hasher{s1: maphash.MakeSeed(), s2: maphash.MakeSeed()}
}

// String hashes a key.
func (h *Hasher) String(key string) Hash {
	return nonZero(Hash{maphash.String(h.s1, key), maphash.String(h.s2, key)})
}

// Bytes hashes a key held in a byte slice, without converting it.
func (h *Hasher) Bytes(key []byte) Hash {
	return nonZero(Hash{maphash.Bytes(h.s1, key), maphash.Bytes(h.s2, key)})
}

// nonZero keeps the all-zero value free: it marks an empty slot.
func nonZero(h Hash) Hash {
	if h.a|h.b == 0 {
		h.b = 1
	}
	return h
}

// Uint64 returns 64 bits of the hash, for callers that shard by it.
func (h Hash) Uint64() uint64 { return h.a }
