package algo

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func mustKeyed(t testing.TB, cfg Config, opts KeyedOptions) *Keyed {
	t.Helper()
	k, err := NewKeyed(cfg, opts)
	if err != nil {
		t.Fatalf("NewKeyed: %v", err)
	}
	return k
}

func TestKeyedSeparatesKeys(t *testing.T) {
	k := mustKeyed(t, Config{Algorithm: GCRA, Limit: 1, Period: time.Second}, KeyedOptions{})
	for _, key := range []string{"a", "b", "", "a\x00", "tenant:acme"} {
		if d := k.AllowAt(key, t0, 1); !d.Allowed {
			t.Errorf("first request for %q refused: %+v", key, d)
		}
		if d := k.AllowAt(key, t0, 1); d.Allowed {
			t.Errorf("second request for %q admitted: %+v", key, d)
		}
	}
	if k.Len() != 5 {
		t.Errorf("Len = %d, want 5", k.Len())
	}
}

func TestKeyedPeekDoesNotStore(t *testing.T) {
	k := mustKeyed(t, Config{Algorithm: FixedWindow, Limit: 10, Period: time.Second}, KeyedOptions{})
	d := k.AllowAt("ghost", t0, 0)
	if !d.Allowed || d.Remaining != 10 || k.Len() != 0 {
		t.Errorf("peek of an unknown key: %+v, Len %d; want a fresh key's state and nothing stored", d, k.Len())
	}
}

// TestKeyedExpiry checks that a key is kept while it has state to remember,
// removed once it has rested for IdleTTL, and that removal is invisible.
func TestKeyedExpiry(t *testing.T) {
	cfg := Config{Algorithm: TokenBucket, Limit: 1, Period: time.Second, Burst: 10}
	k := mustKeyed(t, cfg, KeyedOptions{IdleTTL: time.Minute, Shards: 1})
	k.AllowAt("slow", t0, 10) // empty bucket: full again after 10 s
	if n := k.Sweep(at(5 * time.Second)); n != 0 {
		t.Fatalf("swept %d keys while a bucket was still refilling", n)
	}
	if n := k.Sweep(at(69 * time.Second)); n != 0 {
		t.Fatalf("swept %d keys before IdleTTL after rest", n)
	}
	if n := k.Sweep(at(70 * time.Second)); n != 1 || k.Len() != 0 {
		t.Fatalf("Sweep at rest+TTL removed %d, Len %d; want 1 and 0", n, k.Len())
	}
	if st := k.Stats(); st.Expired != 1 || st.Inserted != 1 {
		t.Errorf("stats %+v, want 1 inserted and 1 expired", st)
	}
}

// TestKeyedIncrementalExpiry checks that inserting new keys reclaims expired
// ones on its own, without a Sweep call: a stream of one-off keys keeps the
// table near the number of keys that are not yet at rest.
func TestKeyedIncrementalExpiry(t *testing.T) {
	cfg := Config{Algorithm: GCRA, Limit: 1000, Period: time.Second}
	k := mustKeyed(t, cfg, KeyedOptions{MaxKeys: 1 << 20, Shards: 4})
	// One key per millisecond for 100 s; each is at rest 1 ms later.
	for i := 0; i < 100_000; i++ {
		k.AllowAt("ip-"+strconv.Itoa(i), at(time.Duration(i)*time.Millisecond), 1)
	}
	if n := k.Len(); n > 2000 {
		t.Errorf("%d keys held after 100,000 one-off keys; expiry is not keeping up", n)
	}
	st := k.Stats()
	if st.Inserted != 100_000 || st.Expired != uint64(100_000-st.Keys) {
		t.Errorf("stats %+v: inserted and expired do not add up", st)
	}
}

// TestKeyedFloodBounded floods the store with distinct keys that are never at
// rest, under each overflow policy, and checks the bound and the counters.
func TestKeyedFloodBounded(t *testing.T) {
	cfg := Config{Algorithm: FixedWindow, Limit: 5, Period: time.Hour}
	const maxKeys = 1000
	for _, policy := range []Overflow{OverflowEvict, OverflowReject, OverflowAllow} {
		t.Run(policy.String(), func(t *testing.T) {
			k := mustKeyed(t, cfg, KeyedOptions{MaxKeys: maxKeys, Overflow: policy})
			admitted := 0
			for i := 0; i < 20_000; i++ {
				if k.AllowAt(fmt.Sprintf("203.0.113.%d/%d", i%256, i), t0, 1).Allowed {
					admitted++
				}
				if k.Len() > maxKeys {
					t.Fatalf("Len %d exceeds MaxKeys %d", k.Len(), maxKeys)
				}
			}
			st := k.Stats()
			if st.Keys != maxKeys {
				t.Errorf("Keys = %d, want the table full at %d", st.Keys, maxKeys)
			}
			switch policy {
			case OverflowEvict:
				if st.Evicted != 19_000 || admitted != 20_000 {
					t.Errorf("evict: %+v, admitted %d; want 19,000 evictions and all admitted", st, admitted)
				}
			case OverflowReject:
				if st.Rejected != 19_000 || admitted != maxKeys {
					t.Errorf("reject: %+v, admitted %d; want 19,000 rejected", st, admitted)
				}
				d := k.AllowAt("newcomer", t0, 1)
				if d.Allowed || d.RetryAfter <= 0 {
					t.Errorf("reject: newcomer got %+v, want a refusal with a RetryAfter", d)
				}
			case OverflowAllow:
				if st.Untracked != 19_000 || admitted != 20_000 {
					t.Errorf("allow: %+v, admitted %d; want 19,000 untracked", st, admitted)
				}
			}
			// Keys already held keep their state whatever the policy.
			if policy != OverflowEvict {
				if d := k.AllowAt("203.0.113.0/0", t0, 5); d.Allowed {
					t.Errorf("a held key lost its state: %+v", d)
				}
			}
		})
	}
}

// TestKeyedFullReclaimsRestingKeys checks that a full store takes a key at
// rest before applying its overflow policy.
func TestKeyedFullReclaimsRestingKeys(t *testing.T) {
	cfg := Config{Algorithm: GCRA, Limit: 1, Period: time.Second}
	k := mustKeyed(t, cfg, KeyedOptions{MaxKeys: 64, Overflow: OverflowReject, Shards: 1})
	for i := 0; i < 64; i++ {
		k.AllowAt(strconv.Itoa(i), t0, 1)
	}
	if d := k.AllowAt("late", at(2*time.Second), 1); !d.Allowed {
		t.Fatalf("a full store of resting keys refused a newcomer: %+v", d)
	}
	if st := k.Stats(); st.Rejected != 0 || st.Expired == 0 {
		t.Errorf("stats %+v: want an expiry, not a rejection", st)
	}
}

func TestKeyedSlidingLogReusesLogs(t *testing.T) {
	cfg := Config{Algorithm: SlidingLog, Limit: 3, Period: time.Second}
	k := mustKeyed(t, cfg, KeyedOptions{Shards: 1})
	for round := 0; round < 50; round++ {
		now := at(time.Duration(round) * 2 * time.Second)
		for i := 0; i < 10; i++ {
			key := strconv.Itoa(round*10 + i)
			if d := k.AllowAt(key, now, 3); !d.Allowed {
				t.Fatalf("round %d key %s: %+v", round, key, d)
			}
			if d := k.AllowAt(key, now, 1); d.Allowed {
				t.Fatalf("round %d key %s: over the limit admitted", round, key)
			}
		}
	}
	if n := len(k.shards[0].logs); n > 20 {
		t.Errorf("%d logs allocated for at most 10 live keys at a time", n)
	}
}

// TestKeyedConcurrent runs many goroutines against shared keys; with -race
// it checks the locking, and it checks that no admission is lost or doubled.
func TestKeyedConcurrent(t *testing.T) {
	for _, alg := range Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := Config{Algorithm: alg, Limit: 1000, Period: time.Hour}
			k := mustKeyed(t, cfg, KeyedOptions{})
			var wg sync.WaitGroup
			admitted := make([]int, 8)
			for g := range admitted {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 2000; i++ {
						if k.AllowAt("k"+strconv.Itoa(i%4), t0, 1).Allowed {
							admitted[g]++
						}
					}
				}()
			}
			wg.Wait()
			total := 0
			for _, n := range admitted {
				total += n
			}
			// Four keys, each allowing its capacity at one instant.
			p, _ := compile(cfg)
			if want := 4 * int(p.maxCost); total != want {
				t.Errorf("admitted %d, want exactly %d", total, want)
			}
		})
	}
}

func TestLimiterConcurrent(t *testing.T) {
	for _, alg := range Algorithms() {
		l := mustNew(t, Config{Algorithm: alg, Limit: 500, Period: time.Hour})
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := 0
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 0
				for i := 0; i < 200; i++ {
					if l.AllowAt(t0, 1).Allowed {
						n++
					}
				}
				mu.Lock()
				total += n
				mu.Unlock()
			}()
		}
		wg.Wait()
		p, _ := compile(l.Config())
		if total != int(p.maxCost) {
			t.Errorf("%v: admitted %d concurrently, want exactly %d", alg, total, p.maxCost)
		}
	}
}

// TestTableRemoveKeepsLookups removes entries from crowded probe runs,
// including runs that wrap around the end, and checks every survivor is
// still found.
func TestTableRemoveKeepsLookups(t *testing.T) {
	var tb table
	tb.slots = make([]entry, 16)
	// Hashes whose home slots crowd the last slots so that runs wrap.
	keys := make([][2]uint64, 0, 12)
	for i := uint64(0); i < 12; i++ {
		h1 := ^uint64(0) - i*(1<<58) // homes near the end of 16 slots
		keys = append(keys, [2]uint64{h1, i + 1})
		j, found := tb.find(h1, i+1)
		if found {
			t.Fatal("duplicate")
		}
		tb.slots[j] = entry{h1: h1, h2: i + 1}
		tb.n++
	}
	for removed := 0; removed < len(keys); removed += 3 {
		i, found := tb.find(keys[removed][0], keys[removed][1])
		if !found {
			t.Fatalf("key %d lost before removal", removed)
		}
		tb.remove(i)
		for j, k := range keys {
			_, found := tb.find(k[0], k[1])
			if want := j%3 != 0 || j > removed; found != want {
				t.Fatalf("after removing %d: key %d found=%v, want %v", removed, j, found, want)
			}
		}
	}
}

// TestStateSizes pins the per-key cost: a 32-byte, pointer-free entry, and
// shards padded to whole cache lines.
func TestStateSizes(t *testing.T) {
	if s := unsafe.Sizeof(entry{}); s != 32 {
		t.Errorf("entry is %d bytes, want 32", s)
	}
	if s := unsafe.Sizeof(shard{}); s%64 != 0 {
		t.Errorf("shard is %d bytes, not a whole number of cache lines", s)
	}
}
