package algo

import (
	"hash/maphash"
	"math/bits"
	"unsafe"
)

// Hash identifies a key inside a Keyed store: two independent 64-bit
// hashes of it. Computing it once lets a caller decide the same key under
// several stores that share a Hasher, or decide and later return cost,
// without hashing the key again.
type Hash struct {
	a, b uint64
}

// Hasher hashes keys with secret random seeds: hash/maphash for one half
// of a Hash and keyed wyhash for the other. Stores that share a Hasher
// accept each other's Hashes. It is safe for concurrent use.
type Hasher struct {
	s1 maphash.Seed
	s2 uint64
}

// NewHasher returns a Hasher with fresh random seeds.
func NewHasher() *Hasher {
	return &Hasher{s1: maphash.MakeSeed(), s2: maphash.Comparable(maphash.MakeSeed(), 0)}
}

// String hashes a key.
func (h *Hasher) String(key string) Hash {
	return nonZero(Hash{maphash.String(h.s1, key), wyhash(key, h.s2)})
}

// Bytes hashes a key held in a byte slice, without converting it.
func (h *Hasher) Bytes(key []byte) Hash {
	return nonZero(Hash{maphash.Bytes(h.s1, key), wyhash(unsafe.String(unsafe.SliceData(key), len(key)), h.s2)})
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

// Sum128 returns all 128 bits of the hash.
func (h Hash) Sum128() (uint64, uint64) { return h.a, h.b }

// Then mixes next into h, for keys made of several parts hashed one by
// one: a.Then(b) identifies the pair (a, b). Each step is a bijection of
// the running value, so two different sequences of the same length collide
// only as two random 128-bit values would.
func (h Hash) Then(next Hash) Hash {
	h.a = bits.RotateLeft64((h.a^next.a)*0x9e3779b97f4a7c15, 29)
	h.b = bits.RotateLeft64((h.b^next.b)*0xc2b2ae3d27d4eb4f, 31)
	return nonZero(h)
}
