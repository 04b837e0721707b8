package agent

import (
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/algo"
)

// total is a global rule's node total: its share of the rule, which every
// request to the rule spends from. One limiter would make every core
// queue on its lock, so a token-bucket total large enough is split into
// shards, one per core or so, each holding its part of the rate and the
// burst. A request spends from its tenant's shard and, when that shard is
// short, from the next that has enough: the shards' rates and bursts add
// up to the total's, so the node never admits more than one limiter
// would. It may admit less: a request costing more than any one shard
// holds is refused while the shards together would hold it. Shards are
// used only where each gets at least minShardUnits of the rate and of
// the burst, so that this stays rare.
type total struct {
	shards []*algo.Limiter
	// active is how many shards are in use (1 or all): a share too small
	// to split runs on the first alone.
	active atomic.Int32
}

// minShardUnits is the least rate (per period) and burst a shard holds.
const minShardUnits = 64

// maxShards bounds the shards of one total.
const maxShards = 8

func shardCount() int {
	n := runtime.GOMAXPROCS(0)
	if n <= 1 {
		return 1
	}
	return min(1<<bits.Len(uint(n-1)), maxShards)
}

func newTotal(cfg algo.Config) (*total, error) { return newTotalOf(cfg, shardCount()) }

// newTotalOf makes a total of up to n shards.
func newTotalOf(cfg algo.Config, n int) (*total, error) {
	t := &total{shards: make([]*algo.Limiter, n)}
	parts, n := split(cfg, len(t.shards))
	for i := range t.shards {
		c := cfg
		if i < n {
			c = parts[i]
		}
		l, err := algo.New(c)
		if err != nil {
			return nil, err
		}
		t.shards[i] = l
	}
	t.active.Store(int32(n))
	return t, nil
}

// split divides cfg among up to n shards: all n when the algorithm is a
// token bucket and each shard gets minShardUnits of rate and burst, else
// one, the whole.
func split(cfg algo.Config, n int) ([]algo.Config, int) {
	if n <= 1 || cfg.Algorithm != algo.TokenBucket || cfg.Limit < int64(n)*minShardUnits || cfg.Burst < int64(n)*minShardUnits {
		return []algo.Config{cfg}, 1
	}
	out := make([]algo.Config, n)
	for i := range out {
		c := cfg
		c.Limit = cfg.Limit / int64(n)
		c.Burst = cfg.Burst / int64(n)
		if int64(i) < cfg.Limit%int64(n) {
			c.Limit++
		}
		if int64(i) < cfg.Burst%int64(n) {
			c.Burst++
		}
		out[i] = c
	}
	return out, n
}

// allow spends cost from the shard of hint, or the next one that holds it.
func (t *total) allow(hint uint64, now time.Time, cost int64) algo.Decision {
	n := uint64(t.active.Load())
	if n == 1 {
		return t.shards[0].AllowAt(now, cost)
	}
	i := hint % n
	d := t.shards[i].AllowAt(now, cost)
	for j := uint64(1); !d.Allowed && j < n; j++ {
		if e := t.shards[(i+j)%n].AllowAt(now, cost); e.Allowed {
			return e
		}
	}
	return d
}

// give returns cost to the shard of hint: the one a request spends from
// first. A cost spent from another shard moves between shards; none is
// created, as a shard keeps no more than its burst.
func (t *total) give(hint uint64, now time.Time, cost int64) {
	n := uint64(t.active.Load())
	t.shards[hint%n].ReturnAt(now, cost)
}

// reconfigure changes the total, keeping each shard's state. A shard
// brought back into use starts empty, so that tokens it held while unused
// are not spent on top of the total.
func (t *total) reconfigure(cfg algo.Config, now time.Time) error {
	parts, n := split(cfg, len(t.shards))
	was := int(t.active.Load())
	for i := range n {
		if err := t.shards[i].Reconfigure(parts[i], now); err != nil {
			return err
		}
		if i >= was { // drain what it holds
			if left := t.shards[i].AllowAt(now, 0).Remaining; left > 0 {
				t.shards[i].AllowAt(now, left)
			}
		}
	}
	t.active.Store(int32(n))
	return nil
}

// peek is the total's limit and what remains of it, over the shards in
// use, spending nothing.
func (t *total) peek(now time.Time) (limit, remaining int64) {
	for _, s := range t.shards[:t.active.Load()] {
		d := s.AllowAt(now, 0)
		limit, remaining = limit+d.Limit, remaining+d.Remaining
	}
	return limit, remaining
}
