package agent

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/allot-io/allot/algo"
)

// TestTotalNeverExceedsOneLimiter: however requests spread over shards,
// what a sharded total admits by any moment is within what one token
// bucket of the same rate and burst can admit: its burst plus its rate
// times the time elapsed. With costs of one, nothing is refused while any
// shard holds a token, so at one instant exactly the burst is admitted.
func TestTotalNeverExceedsOneLimiter(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.SampledFrom([]int{1, 2, 4, 8}).Draw(t, "shards")
		limit := rapid.Int64Range(64, 100_000).Draw(t, "limit")
		burst := rapid.Int64Range(1, 50_000).Draw(t, "burst")
		cfg := algo.Config{Algorithm: algo.TokenBucket, Limit: limit, Period: time.Second, Burst: burst}
		tot, err := newTotalOf(cfg, n)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Unix(1_700_000_000, 0)
		now := start
		var admitted int64
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for i := range steps {
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(50*time.Millisecond)).Draw(t, "dt")))
			cost := rapid.Int64Range(1, 40).Draw(t, "cost")
			hint := rapid.Uint64().Draw(t, "hint")
			if tot.allow(hint, now, cost).Allowed {
				admitted += cost
				if rapid.IntRange(0, 9).Draw(t, "undo") == 0 { // a later rule refused
					tot.give(hint, now, cost)
					admitted -= cost
				}
			}
			bound := float64(burst) + float64(limit)*now.Sub(start).Seconds()
			if float64(admitted) > bound+1e-6 {
				t.Fatalf("step %d: admitted %d by %v; one bucket of %d/s, burst %d, admits at most %.1f", i, admitted, now.Sub(start), limit, burst, bound)
			}
		}
	})
}

func TestTotalAdmitsTheWholeBurstAtOnce(t *testing.T) {
	cfg := algo.Config{Algorithm: algo.TokenBucket, Limit: 10_000, Period: time.Second, Burst: 1_000}
	tot, err := newTotalOf(cfg, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := tot.active.Load(); got != 4 {
		t.Fatalf("%d shards in use, want 4", got)
	}
	now := time.Unix(1_700_000_000, 0)
	admitted := 0
	for i := range 1_200 {
		if tot.allow(uint64(i%3), now, 1).Allowed { // three tenants, one shard unused by hint
			admitted++
		}
	}
	if admitted != 1_000 {
		t.Fatalf("admitted %d at one instant; the burst is 1000", admitted)
	}
	if limit, remaining := tot.peek(now); limit != 1_000 || remaining != 0 {
		t.Fatalf("peek: limit %d remaining %d", limit, remaining)
	}
}

// TestTotalSplitsOnlyWhatItShould: small totals and other algorithms stay
// in one limiter, and a total shrunk below the split and grown back starts
// its returning shards empty.
func TestTotalSplitsOnlyWhatItShould(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, cfg := range []algo.Config{
		{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Second, Burst: 100},
		{Algorithm: algo.GCRA, Limit: 100_000, Period: time.Second, Burst: 10_000},
		{Algorithm: algo.FixedWindow, Limit: 100_000, Period: time.Second},
	} {
		tot, err := newTotalOf(cfg, 4)
		if err != nil {
			t.Fatal(err)
		}
		if got := tot.active.Load(); got != 1 {
			t.Errorf("%v limit %d: %d shards, want 1", cfg.Algorithm, cfg.Limit, got)
		}
	}
	big := algo.Config{Algorithm: algo.TokenBucket, Limit: 10_000, Period: time.Second, Burst: 1_000}
	tot, _ := newTotalOf(big, 4)
	small := algo.Config{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Second, Burst: 100}
	if err := tot.reconfigure(small, now); err != nil || tot.active.Load() != 1 {
		t.Fatalf("shrunk: %v, %d shards", err, tot.active.Load())
	}
	if err := tot.reconfigure(big, now); err != nil || tot.active.Load() != 4 {
		t.Fatalf("grown back: %v, %d shards", err, tot.active.Load())
	}
	admitted := 0
	for i := range 2_000 {
		if tot.allow(uint64(i), now, 1).Allowed {
			admitted++
		}
	}
	if admitted > 250 {
		t.Fatalf("admitted %d at once after growing back: the returning shards must start empty, leaving at most the first's 250", admitted)
	}
}
