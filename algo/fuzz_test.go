package algo

import (
	"encoding/binary"
	"testing"
	"time"
)

// FuzzLimiter feeds arbitrary configurations and request streams to New,
// NewKeyed and AllowAt. An invalid configuration must be an error, never a
// panic; a valid one must only ever produce decisions that make sense.
func FuzzLimiter(f *testing.F) {
	f.Add(uint8(GCRA), int64(100), int64(time.Second), int64(50), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint8(SlidingWindow), int64(10), int64(time.Minute), int64(0), []byte("the quick brown fox"))
	f.Add(uint8(SlidingLog), int64(3), int64(time.Millisecond), int64(0), []byte{0xff, 0, 0xff, 0})
	f.Add(uint8(0), int64(-1), int64(0), int64(-5), []byte{})
	f.Fuzz(func(t *testing.T, alg uint8, limit, period, burst int64, stream []byte) {
		cfg := Config{Algorithm: Algorithm(alg), Limit: limit, Period: time.Duration(period), Burst: burst}
		l, err := New(cfg)
		k, kerr := NewKeyed(cfg, KeyedOptions{MaxKeys: 8, Overflow: Overflow(alg % 3)})
		if (err == nil) != (kerr == nil) {
			t.Fatalf("New and NewKeyed disagree: %v / %v", err, kerr)
		}
		if err != nil {
			return
		}
		if cfg.Algorithm == SlidingLog && cfg.Limit > 1<<12 {
			return // memory grows with the limit; keep the fuzzer fast
		}
		// Each 4 bytes: a time step (ms, may go back), a cost, a key.
		now := t0
		for len(stream) >= 4 {
			step := int64(int8(stream[0])) * int64(time.Millisecond) * int64(1+stream[1]%64)
			cost := int64(binary.LittleEndian.Uint16(stream[1:3])) % (2*cfg.Limit + 3)
			key := string(rune('a' + stream[3]%12))
			stream = stream[4:]
			now = now.Add(time.Duration(step))
			for _, d := range []Decision{l.AllowAt(now, cost), k.AllowAt(key, now, cost)} {
				if d.Remaining < 0 || d.Remaining > d.Limit {
					t.Fatalf("Remaining %d outside [0, %d]", d.Remaining, d.Limit)
				}
				if d.ResetAfter < 0 {
					t.Fatalf("negative ResetAfter %v", d.ResetAfter)
				}
				if d.Allowed && cost > 0 && d.RetryAfter != 0 {
					t.Fatalf("admitted with RetryAfter %v", d.RetryAfter)
				}
				if !d.Allowed && d.RetryAfter < 0 && cost <= d.Limit {
					t.Fatalf("Never for cost %d within limit %d", cost, d.Limit)
				}
			}
			if k.Len() > 8 {
				t.Fatalf("Keyed holds %d keys, over MaxKeys 8", k.Len())
			}
		}
	})
}
