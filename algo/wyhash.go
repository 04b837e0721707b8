package algo

import "math/bits"

// wyhash is the second, independent half of a key's Hash: Wang Yi's wyhash
// (final version 4, short-input path and 16-byte loop), keyed with a secret
// seed. hash/maphash provides the first half; wyhash costs a few
// nanoseconds for a short key where a second maphash call costs about
// seven. Two keys share a Hash only if both halves collide.
const (
	wyp0 = 0xa0761d6478bd642f
	wyp1 = 0xe7037ed1a0b428db
	wyp2 = 0x8ebc6af09c88c6e3
)

func wymix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func wyr8(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

func wyr4(s string, i int) uint64 {
	_ = s[i+3]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24
}

func wyr3(s string, n int) uint64 {
	return uint64(s[0])<<16 | uint64(s[n>>1])<<8 | uint64(s[n-1])
}

func wyhash(s string, seed uint64) uint64 {
	n := len(s)
	seed ^= wymix(seed^wyp0, wyp1)
	var a, b uint64
	switch {
	case n <= 16:
		switch {
		case n >= 4:
			q := (n >> 3) << 2
			a = wyr4(s, 0)<<32 | wyr4(s, q)
			b = wyr4(s, n-4)<<32 | wyr4(s, n-4-q)
		case n > 0:
			a = wyr3(s, n)
		}
	default:
		i := 0
		for ; n-i > 16; i += 16 {
			seed = wymix(wyr8(s, i)^wyp1, wyr8(s, i+8)^seed)
		}
		a, b = wyr8(s, n-16), wyr8(s, n-8)
	}
	a ^= wyp1
	b ^= seed
	a, b = bits.Mul64(a, b)
	return wymix(a^wyp0^uint64(n), b^wyp1)
}
