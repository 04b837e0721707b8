package algo

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestPropertyReturnUndoesAllow: admitting a request and returning its
// cost at once leaves every algorithm deciding exactly as if the request
// had never come, for Limiter and for Keyed.
func TestPropertyReturnUndoesAllow(t *testing.T) {
	for _, alg := range Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				cfg := genConfig(t, alg)
				plain, _ := New(cfg)
				undone, _ := New(cfg)
				k, _ := NewKeyed(cfg, KeyedOptions{Shards: 1})
				h := k.Hasher().String("key")
				for i, r := range genForward(t, cfg) {
					now := at(time.Duration(r.t))
					if rapid.IntRange(0, 2).Draw(t, "undo") == 0 {
						c := rapid.Int64Range(1, cfg.Limit).Draw(t, "undoCost")
						if undone.AllowAt(now, c).Allowed {
							undone.ReturnAt(now, c)
						}
						if k.AllowHashAt(h, now, c).Allowed {
							k.ReturnHashAt(h, now, c)
						}
					}
					want := plain.AllowAt(now, r.cost)
					if got := undone.AllowAt(now, r.cost); got != want {
						t.Fatalf("step %d: Limiter with undone requests %+v, without %+v", i, got, want)
					}
					if got := k.AllowHashAt(h, now, r.cost); got != want {
						t.Fatalf("step %d: Keyed with undone requests %+v, without %+v", i, got, want)
					}
				}
			})
		})
	}
}

func TestReconfigureKeepsWhatWasSpent(t *testing.T) {
	tests := []struct {
		alg          Algorithm
		from, to     Config
		spend        int64
		wantRemain   int64
		wantAdmitted int // of 100 unit requests right after the change
	}{
		// 8 of 10 tokens spent; the bucket grows to 20 but keeps its 2
		// tokens: the new capacity fills at the new rate, not at once.
		{TokenBucket, Config{Limit: 10, Period: time.Second, Burst: 10}, Config{Limit: 20, Period: time.Second, Burst: 20}, 8, 2, 2},
		// 2 of 20 spent; the bucket shrinks to 10: full at 10.
		{TokenBucket, Config{Limit: 20, Period: time.Second, Burst: 20}, Config{Limit: 10, Period: time.Second, Burst: 10}, 2, 10, 10},
		// 30 of 100 spent in the window; the limit falls to 50: 20 left.
		{FixedWindow, Config{Limit: 100, Period: time.Minute}, Config{Limit: 50, Period: time.Minute}, 30, 20, 20},
		{SlidingWindow, Config{Limit: 100, Period: time.Minute}, Config{Limit: 50, Period: time.Minute}, 30, 20, 20},
		{SlidingLog, Config{Limit: 100, Period: time.Minute}, Config{Limit: 50, Period: time.Minute}, 30, 20, 20},
		// GCRA keeps its units of burst: 5 of 1+9 left at 10/s stay 5 at
		// 1/s, though the TAT alone would allow 9.
		{GCRA, Config{Limit: 10, Period: time.Second, Burst: 9}, Config{Limit: 1, Period: time.Second, Burst: 9}, 5, 5, 5},
		// A larger burst is earned, not granted: 5 of 10 left stay 5 of 30.
		{GCRA, Config{Limit: 10, Period: time.Second, Burst: 9}, Config{Limit: 10, Period: time.Second, Burst: 29}, 5, 5, 5},
	}
	for _, tt := range tests {
		t.Run(tt.alg.String(), func(t *testing.T) {
			tt.from.Algorithm, tt.to.Algorithm = tt.alg, tt.alg
			l := mustNew(t, tt.from)
			k := mustKeyed(t, tt.from, KeyedOptions{Shards: 2})
			l.AllowAt(t0, tt.spend)
			k.AllowAt("a", t0, tt.spend)
			if err := l.Reconfigure(tt.to, t0); err != nil {
				t.Fatal(err)
			}
			if err := k.Reconfigure(tt.to, t0); err != nil {
				t.Fatal(err)
			}
			for name, allow := range map[string]func(time.Time, int64) Decision{
				"Limiter": l.AllowAt,
				"Keyed":   func(now time.Time, c int64) Decision { return k.AllowAt("a", now, c) },
			} {
				if d := allow(t0, 0); d.Remaining != tt.wantRemain {
					t.Errorf("%s: remaining %d after reconfigure, want %d", name, d.Remaining, tt.wantRemain)
				}
				n := 0
				for i := 0; i < 100; i++ {
					if allow(t0, 1).Allowed {
						n++
					}
				}
				if n != tt.wantAdmitted {
					t.Errorf("%s: admitted %d, want %d", name, n, tt.wantAdmitted)
				}
			}
			if l.Config() != tt.to || k.Config() != tt.to {
				t.Errorf("Config() not updated")
			}
		})
	}
	l := mustNew(t, Config{Algorithm: GCRA, Limit: 1, Period: time.Second})
	if err := l.Reconfigure(Config{Algorithm: TokenBucket, Limit: 1, Period: time.Second}, t0); err == nil {
		t.Error("changing the algorithm was accepted")
	}
	if err := l.Reconfigure(Config{Algorithm: GCRA, Limit: -1, Period: time.Second}, t0); err == nil {
		t.Error("an invalid config was accepted")
	}
}

func TestHasherSharedAcrossStores(t *testing.T) {
	h := NewHasher()
	a := mustKeyed(t, Config{Algorithm: GCRA, Limit: 1, Period: time.Second}, KeyedOptions{Hasher: h})
	b := mustKeyed(t, Config{Algorithm: FixedWindow, Limit: 2, Period: time.Second}, KeyedOptions{Hasher: h})
	key := h.Bytes([]byte("tenant:acme"))
	if key != h.String("tenant:acme") {
		t.Fatal("Bytes and String hash differently")
	}
	if !a.AllowHashAt(key, t0, 1).Allowed || a.AllowAt("tenant:acme", t0, 1).Allowed {
		t.Error("a Hash and its key are not the same key")
	}
	if !b.AllowHashAt(key, t0, 2).Allowed {
		t.Error("store b refused")
	}
	_ = fmt.Sprint(key.Uint64())
}

// TestPropertyReconfigureGrantsNothing: changing a limit never lets more be
// admitted at once than could be just before, for the rate algorithms
// whose shares leases change.
func TestPropertyReconfigureGrantsNothing(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				from, to := genConfig(t, alg), genConfig(t, alg)
				l, _ := New(from)
				var now time.Time
				for _, r := range genForward(t, from) {
					now = at(time.Duration(r.t))
					l.AllowAt(now, r.cost)
				}
				before := l.AllowAt(now, 0).Remaining
				if err := l.Reconfigure(to, now); err != nil {
					t.Fatal(err)
				}
				n := int64(0)
				for l.AllowAt(now, 1).Allowed {
					n++
					if n > to.Limit+to.Burst+2 {
						break
					}
				}
				if n > before {
					t.Fatalf("%d admitted at once after reconfiguring, %d could be before", n, before)
				}
			})
		})
	}
}

// TestGCRARateRiseTakesEffect: a GCRA limiter that has just spent its
// capacity at a slow rate, then is given a faster one, next admits at the
// new rate's spacing. Its TAT stayed where the old rate had put it, so a
// node whose lease rose waited out the old, slower spacing on every
// change: with a lease changing at every report, a global GCRA rule over
// 50 gateways used 93% of its limit in the simulator (issue 11).
func TestGCRARateRiseTakesEffect(t *testing.T) {
	l := mustNew(t, Config{Algorithm: GCRA, Limit: 1, Period: time.Second})
	if !l.AllowAt(t0, 1).Allowed {
		t.Fatal("first request refused")
	}
	if err := l.Reconfigure(Config{Algorithm: GCRA, Limit: 100, Period: time.Second}, t0); err != nil {
		t.Fatal(err)
	}
	if l.AllowAt(t0, 1).Allowed {
		t.Error("admitted at once after the change: the capacity spent is still spent")
	}
	if !l.AllowAt(t0.Add(20*time.Millisecond), 1).Allowed {
		t.Error("refused 20 ms after the rate rose to 100/s; want the new 10 ms spacing, not the old 1 s")
	}
}
