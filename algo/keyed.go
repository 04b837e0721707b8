package algo

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Overflow says what a Keyed store does with a new key when it already
// holds MaxKeys keys and none of them has expired.
type Overflow uint8

const (
	// OverflowEvict removes the key closest to rest among a small sample
	// and admits the new key in its place. Memory stays bounded and every
	// subject stays limited; the evicted subject, which was not yet at
	// rest, starts afresh (counted in KeyedStats.Evicted).
	OverflowEvict Overflow = iota
	// OverflowReject refuses requests from new keys until a slot frees up:
	// the choice for abuse limits, which fail closed.
	OverflowReject
	// OverflowAllow decides each new key's request as if the key were
	// fresh, without storing it: the choice for limits that fail open.
	OverflowAllow
)

func (o Overflow) String() string {
	switch o {
	case OverflowEvict:
		return "evict"
	case OverflowReject:
		return "reject"
	case OverflowAllow:
		return "allow"
	}
	return fmt.Sprintf("overflow(%d)", uint8(o))
}

// KeyedOptions bound a Keyed store.
type KeyedOptions struct {
	// MaxKeys bounds the number of keys held; zero means DefaultMaxKeys.
	MaxKeys int
	// IdleTTL is how long a key is kept after its state has returned to
	// rest (a fresh key would decide the same) before it may be removed.
	// Removing a key at rest loses nothing, so zero is safe; a TTL only
	// saves re-inserting keys that come back soon.
	IdleTTL time.Duration
	// Overflow is what happens to a new key when MaxKeys keys are held and
	// none has expired.
	Overflow Overflow
	// Shards is the number of independently locked shards, rounded up to a
	// power of two; zero picks one from MaxKeys (at most 1024).
	Shards int
	// Hasher hashes keys; stores sharing one accept each other's Hashes.
	// Nil means a Hasher of the store's own.
	Hasher *Hasher
}

// DefaultMaxKeys is the bound of a Keyed store whose options set none:
// about 50 MB of per-key state.
const DefaultMaxKeys = 1 << 20

const (
	// sweepPerInsert is how many slots each insertion examines for expired
	// keys, so expiry keeps pace with insertion without any full scan.
	sweepPerInsert = 4
	// evictSample is how many keys are compared to choose a victim when
	// the store is full.
	evictSample = 8
	maxShards   = 1024
)

// KeyedStats counts what a Keyed store has done since it was created.
type KeyedStats struct {
	Keys      int    // keys held now
	Inserted  uint64 // keys created
	Expired   uint64 // keys removed after resting for IdleTTL
	Evicted   uint64 // keys not yet at rest removed to make room (OverflowEvict): their subjects started afresh
	Rejected  uint64 // requests refused because the store was full (OverflowReject)
	Untracked uint64 // requests decided without storing their key because the store was full
}

// shardStats are one shard's counters, guarded by its lock.
type shardStats struct {
	inserted, expired, evicted, rejected, untracked uint64
}

// Keyed enforces one Config separately for each of millions of keys. It is
// safe for concurrent use: keys are spread over independently locked
// shards, each an open-addressing table of fixed-size, pointer-free entries.
// Deciding for a key already held allocates nothing.
type Keyed struct {
	alg        Algorithm
	opts       KeyedOptions
	hasher     *Hasher
	ttl        int64
	shardShift uint
	count      atomic.Int64
	shards     []shard

	cfgMu sync.Mutex
	cfg   Config // guarded by cfgMu; each shard holds its own compiled copy
}

// shard is one independently locked part of a Keyed store, padded to whole
// cache lines so that neighbouring shards' locks never share one.
type shard struct {
	shardData
	_ [64 - unsafe.Sizeof(shardData{})%64]byte
}

type shardData struct {
	mu    sync.Mutex
	p     params // this shard's copy, so that Reconfigure needs no global lock
	t     table
	hand  int          // next slot to examine for expiry
	logs  []slidingLog // SlidingLog only: per-key logs, state.a = index+1
	free  []int32      // unused indexes of logs
	stats shardStats
	// handed are the keys handed over to a caller's limiter: this shard
	// decides none of them until it is given it back.
	handed map[Hash]struct{}
}

// NewKeyed returns a Keyed store enforcing cfg for every key, or an error
// naming the invalid field of cfg or opts.
func NewKeyed(cfg Config, opts KeyedOptions) (*Keyed, error) {
	p, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	if opts.MaxKeys < 0 {
		return nil, &ConfigError{"MaxKeys", fmt.Sprintf("must not be negative, got %d", opts.MaxKeys)}
	}
	if opts.MaxKeys == 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.IdleTTL < 0 || opts.IdleTTL > maxPeriod {
		return nil, &ConfigError{"IdleTTL", fmt.Sprintf("must be between 0 and %v, got %v", maxPeriod, opts.IdleTTL)}
	}
	if opts.Overflow > OverflowAllow {
		return nil, &ConfigError{"Overflow", fmt.Sprintf("unknown policy %d", uint8(opts.Overflow))}
	}
	if opts.Shards < 0 || opts.Shards > maxShards {
		return nil, &ConfigError{"Shards", fmt.Sprintf("must be between 0 and %d, got %d", maxShards, opts.Shards)}
	}
	if opts.Shards == 0 {
		// About 64 keys per shard at the bound, at most 1024 shards.
		opts.Shards = min(max(opts.MaxKeys/64, 1), maxShards)
	}
	n := 1 << bits.Len(uint(opts.Shards-1)) // round up to a power of two
	opts.Shards = n
	if opts.Hasher == nil {
		opts.Hasher = NewHasher()
	}
	k := &Keyed{
		alg:        p.alg,
		opts:       opts,
		hasher:     opts.Hasher,
		ttl:        int64(opts.IdleTTL),
		shardShift: uint(64 - bits.Len(uint(n-1))),
		shards:     make([]shard, n),
		cfg:        cfg,
	}
	for i := range k.shards {
		k.shards[i].p = p
	}
	return k, nil
}

// Config returns the configuration k enforces for each key.
func (k *Keyed) Config() Config {
	k.cfgMu.Lock()
	defer k.cfgMu.Unlock()
	return k.cfg
}

// Hasher returns the Hasher that makes this store's Hashes.
func (k *Keyed) Hasher() *Hasher { return k.hasher }

// Reconfigure changes the limit every key is held to at now, keeping each
// key's state as Limiter.Reconfigure does. The algorithm cannot change. It
// locks one shard at a time.
func (k *Keyed) Reconfigure(cfg Config, now time.Time) error {
	p, err := compile(cfg)
	if err != nil {
		return err
	}
	if p.alg != k.alg {
		return &ConfigError{"Algorithm", fmt.Sprintf("cannot change from %v to %v; make a new store", k.alg, p.alg)}
	}
	k.cfgMu.Lock()
	defer k.cfgMu.Unlock()
	ns := now.UnixNano()
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		old := sh.p
		sh.p = p
		if p.alg == TokenBucket || p.alg == GCRA {
			for j := range sh.t.slots {
				if e := &sh.t.slots[j]; !e.empty() {
					p.carryOver(&e.s, &old, ns)
				}
			}
		}
		sh.mu.Unlock()
	}
	k.cfg = cfg
	return nil
}

// Options returns k's options with defaults filled in.
func (k *Keyed) Options() KeyedOptions { return k.opts }

// Allow is shorthand for AllowAt(key, time.Now(), cost).
func (k *Keyed) Allow(key string, cost int64) Decision { return k.AllowAt(key, time.Now(), cost) }

// AllowAt decides a request of the given cost for key arriving at now, and
// spends the cost if it is admitted. A peek (cost 0) for a key not held
// reports a fresh key's state and does not store the key.
func (k *Keyed) AllowAt(key string, now time.Time, cost int64) Decision {
	return k.AllowHashAt(k.hasher.String(key), now, cost)
}

// AllowHashAt is AllowAt for a key already hashed by this store's Hasher.
func (k *Keyed) AllowHashAt(h Hash, now time.Time, cost int64) (d Decision) {
	v, limit := k.allowHashed(k.shard(h.b), h.a, h.b, now.UnixNano(), cost)
	if limit < 0 {
		d.HandedOver = true
		return d
	}
	d.set(v, limit)
	return d
}

// PeekAt answers for key what AllowAt(key, now, cost) would, spending
// nothing and storing nothing (see Limiter.PeekAt). A key not held is
// answered as a fresh key, even when the store is full and a request
// would meet its Overflow.
func (k *Keyed) PeekAt(key string, now time.Time, cost int64) Decision {
	return k.PeekHashAt(k.hasher.String(key), now, cost)
}

// PeekHashAt is PeekAt for a key already hashed by this store's Hasher. A
// key handed over (HandOverHashAt) is answered HandedOver, as by
// AllowHashAt: the caller's limiter holds its state.
func (k *Keyed) PeekHashAt(h Hash, now time.Time, cost int64) (d Decision) {
	ns := now.UnixNano()
	sh := k.shard(h.b)
	sh.mu.Lock()
	if len(sh.handed) > 0 {
		if _, ok := sh.handed[h]; ok {
			sh.mu.Unlock()
			d.HandedOver = true
			return d
		}
	}
	var v verdict
	i, found := 0, false
	if len(sh.t.slots) > 0 {
		i, found = sh.t.find(h.a, h.b)
	}
	switch {
	case !found && sh.p.alg == SlidingLog:
		var l slidingLog
		v = sh.p.slidingLogPeek(&l, ns, cost)
	case !found:
		v = sh.p.peek(state{}, ns, cost)
	case sh.p.alg == SlidingLog:
		v = sh.p.slidingLogPeek(&sh.logs[sh.t.slots[i].s.a-1], ns, cost)
	default:
		v = sh.p.peek(sh.t.slots[i].s, ns, cost)
	}
	d.set(v, sh.p.maxCost)
	sh.mu.Unlock()
	return d
}

// HandOverHashAt hands a key over to a limiter of the caller's: under the
// key's lock, seed is given the key's state at now (as a peek, cost 0,
// decides it), and from then on the store decides nothing for the key
// (AllowHashAt answers HandedOver) until TakeBackHash. No request is
// decided between the state seed reads and the handover, so a caller that
// seeds its limiter with that state and sends HandedOver requests there
// counts every request exactly once. seed must not call back into k.
func (k *Keyed) HandOverHashAt(h Hash, now time.Time, seed func(Decision)) {
	sh := k.shard(h.b)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var d Decision
	v := sh.decideFresh(now.UnixNano(), 0)
	if len(sh.t.slots) > 0 {
		if i, found := sh.t.find(h.a, h.b); found {
			v = sh.decide(&sh.t.slots[i].s, now.UnixNano(), 0)
		}
	}
	d.set(v, sh.p.maxCost)
	seed(d)
	if sh.handed == nil {
		sh.handed = map[Hash]struct{}{}
	}
	sh.handed[h] = struct{}{}
}

// TakeBackHash makes the store decide a handed-over key again, from the
// state it held when it was handed over.
func (k *Keyed) TakeBackHash(h Hash) {
	sh := k.shard(h.b)
	sh.mu.Lock()
	delete(sh.handed, h)
	sh.mu.Unlock()
}

// ResetHash removes a key's state, so that its next request is decided
// as a fresh key's: an operator's reset of the key. It reports whether
// the key was held. A key handed over (HandOverHashAt) stays handed over:
// its state is in the caller's limiter, which the caller resets; what the
// store held from before the handover is removed all the same, so that a
// TakeBackHash starts the key afresh too.
func (k *Keyed) ResetHash(h Hash) bool {
	sh := k.shard(h.b)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.t.slots) == 0 {
		return false
	}
	i, found := sh.t.find(h.a, h.b)
	if found {
		sh.removeAt(k, i)
	}
	return found
}

// ReturnHashAt gives back cost admitted for a key at now, as if that
// admission had not happened: for callers that admit under several limits
// and must undo one when a later limit refuses. Returning more than was
// admitted never buys more than a fresh key has.
func (k *Keyed) ReturnHashAt(h Hash, now time.Time, cost int64) {
	if cost <= 0 {
		return
	}
	sh := k.shard(h.b)
	sh.mu.Lock()
	if _, handed := sh.handed[h]; !handed && len(sh.t.slots) > 0 {
		if i, found := sh.t.find(h.a, h.b); found {
			s := &sh.t.slots[i].s
			if k.alg == SlidingLog {
				sh.logs[s.a-1].refund(now.UnixNano(), cost)
			} else {
				sh.p.refund(s, now.UnixNano(), cost)
			}
		}
	}
	sh.mu.Unlock()
}

// shard picks a key's shard by the top bits of its hash; with one shard
// the shift is 64, which in Go yields 0.
func (k *Keyed) shard(h2 uint64) *shard { return &k.shards[h2>>k.shardShift] }

// allowHashed decides under the shard's lock and returns the verdict with
// the limit it was decided under.
func (k *Keyed) allowHashed(sh *shard, h1, h2 uint64, now, cost int64) (verdict, int64) {
	if cost < 0 {
		cost = 0
	}
	sh.mu.Lock()
	if len(sh.handed) > 0 {
		if _, ok := sh.handed[Hash{h1, h2}]; ok {
			sh.mu.Unlock()
			return verdict{}, -1 // AllowHashAt: HandedOver
		}
	}
	if len(sh.t.slots) == 0 {
		sh.t.grow()
	}
	var v verdict
	if i, found := sh.t.find(h1, h2); found {
		v = sh.decide(&sh.t.slots[i].s, now, cost)
	} else if cost == 0 {
		v = sh.decideFresh(now, cost)
	} else {
		v = k.insert(sh, h1, h2, now, cost)
	}
	limit := sh.p.maxCost // read under the lock, as Reconfigure may change it
	sh.mu.Unlock()
	return v, limit
}

// decide applies a request to a held key's state.
func (sh *shard) decide(s *state, now, cost int64) verdict {
	if sh.p.alg == SlidingLog {
		return sh.p.slidingLog(&sh.logs[s.a-1], now, cost)
	}
	return sh.p.decide(s, now, cost)
}

// decideFresh decides a request for a key that is not stored.
func (sh *shard) decideFresh(now, cost int64) verdict {
	if sh.p.alg == SlidingLog {
		var l slidingLog
		return sh.p.slidingLog(&l, now, cost)
	}
	var s state
	return sh.p.decide(&s, now, cost)
}

// insert creates the key (h1, h2) and decides its first request; sh is
// locked and the key is not held.
func (k *Keyed) insert(sh *shard, h1, h2 uint64, now, cost int64) verdict {
	sh.sweep(k, now, sweepPerInsert)
	if !k.reserve() {
		victim, restAt, ok := sh.victim(k)
		switch {
		case ok && restAt+k.ttl <= now:
			sh.stats.expired++
			sh.removeAt(k, victim)
		case ok && k.opts.Overflow == OverflowEvict:
			sh.stats.evicted++
			sh.removeAt(k, victim)
		case k.opts.Overflow == OverflowReject:
			sh.stats.rejected++
			v := sh.decideFresh(now, 0)
			v.allowed, v.retryAfter = false, dur(restAt+k.ttl-now)
			if !ok {
				v.retryAfter = k.opts.IdleTTL + time.Duration(sh.p.period)
			}
			return v
		default:
			// OverflowAllow, or OverflowEvict with nothing in this shard
			// to evict: decide as a fresh key without storing it.
			sh.stats.untracked++
			return sh.decideFresh(now, cost)
		}
		// The removal released a reservation; take it again.
		k.count.Add(1)
	}
	if sh.t.needsGrowth() {
		sh.t.grow()
	}
	i, _ := sh.t.find(h1, h2)
	e := &sh.t.slots[i]
	e.h1, e.h2, e.s = h1, h2, state{}
	sh.t.n++
	sh.stats.inserted++
	if k.alg == SlidingLog {
		e.s.a = int64(sh.newLog()) + 1
	}
	return sh.decide(&e.s, now, cost)
}

// reserve counts one more key if the store has room for it.
func (k *Keyed) reserve() bool {
	limit := int64(k.opts.MaxKeys)
	for {
		n := k.count.Load()
		if n >= limit {
			return false
		}
		if k.count.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// restAt returns the instant from which entry i of sh is at rest.
func (k *Keyed) restAt(sh *shard, s state) int64 {
	if k.alg == SlidingLog {
		return sh.logs[s.a-1].restAt(&sh.p)
	}
	return sh.p.restAt(s)
}

// removeAt removes slot i of sh, releasing its log if it has one.
func (sh *shard) removeAt(k *Keyed, i int) {
	if k.alg == SlidingLog {
		idx := int32(sh.t.slots[i].s.a - 1)
		sh.logs[idx].reset()
		sh.free = append(sh.free, idx)
	}
	sh.t.remove(i)
	k.count.Add(-1)
}

func (sh *shard) newLog() int32 {
	if n := len(sh.free); n > 0 {
		idx := sh.free[n-1]
		sh.free = sh.free[:n-1]
		return idx
	}
	sh.logs = append(sh.logs, slidingLog{})
	return int32(len(sh.logs) - 1)
}

// sweep examines up to budget slots from the hand and removes keys that have
// rested for the TTL. It returns how many it removed.
func (sh *shard) sweep(k *Keyed, now int64, budget int) int {
	removed := 0
	for ; budget > 0 && sh.t.n > 0; budget-- {
		if sh.hand >= len(sh.t.slots) {
			sh.hand = 0
		}
		if sh.expireAt(k, sh.hand, now) {
			removed++
			continue // a later entry may have shifted into this slot
		}
		sh.hand++
	}
	return removed
}

// sweepAll removes every key of sh that has rested for the TTL, in one pass.
func (sh *shard) sweepAll(k *Keyed, now int64) int {
	removed := 0
	for i := 0; i < len(sh.t.slots); {
		if sh.expireAt(k, i, now) {
			removed++
			continue // a later entry may have shifted into this slot
		}
		i++
	}
	sh.hand = 0
	return removed
}

// expireAt removes slot i if it holds a key that has rested for the TTL.
func (sh *shard) expireAt(k *Keyed, i int, now int64) bool {
	e := &sh.t.slots[i]
	if e.empty() || k.restAt(sh, e.s)+k.ttl > now {
		return false
	}
	sh.removeAt(k, i)
	sh.stats.expired++
	return true
}

// victim samples up to evictSample keys from the hand and returns the one
// that reaches rest first, with its rest instant.
func (sh *shard) victim(k *Keyed) (slot int, restAt int64, ok bool) {
	size := len(sh.t.slots)
	if sh.t.n == 0 {
		return 0, 0, false
	}
	seen := 0
	for i, j := 0, sh.hand; i < size && seen < evictSample; i++ {
		if j >= size {
			j = 0
		}
		if e := &sh.t.slots[j]; !e.empty() {
			r := k.restAt(sh, e.s)
			if !ok || r < restAt {
				slot, restAt, ok = j, r, true
			}
			seen++
		}
		j++
	}
	sh.hand = slot + 1
	return slot, restAt, ok
}

// Sweep removes every key that has rested for IdleTTL by now, one shard at a
// time, holding each shard's lock only for that shard. It is meant for a
// background janitor; AllowAt expires keys incrementally on its own. It
// returns how many keys it removed.
func (k *Keyed) Sweep(now time.Time) int {
	ns := now.UnixNano()
	removed := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		removed += sh.sweepAll(k, ns)
		sh.mu.Unlock()
	}
	return removed
}

// Len returns the number of keys held, including any that have expired but
// not yet been swept.
func (k *Keyed) Len() int { return int(k.count.Load()) }

// Stats returns counts of what k has done.
func (k *Keyed) Stats() KeyedStats {
	var st KeyedStats
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		st.Inserted += sh.stats.inserted
		st.Expired += sh.stats.expired
		st.Evicted += sh.stats.evicted
		st.Rejected += sh.stats.rejected
		st.Untracked += sh.stats.untracked
		sh.mu.Unlock()
	}
	st.Keys = k.Len()
	return st
}
