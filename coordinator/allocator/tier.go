package allocator

import (
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// The tier between regions. A rule whose limit is divided among regions
// (its regions fractions) is one allowance for the world, and a region
// whose tenants moved elsewhere should not keep its fixed fraction idle
// while another region refuses them. So each region's cluster leases its
// part from a parent cluster, as agents lease theirs from the region's:
// the region's leader reports, per key, the demand its nodes reported,
// and the parent divides the whole limit among the regions in proportion
// to it, with the same allocator, the same estimator and the same guards.
// The region's cluster then divides its lease among its nodes instead of
// the static fraction.
//
// A region that cannot reach the parent keeps its lease until it
// expires, then returns to its static fraction. The parent keeps the
// static fraction of every region it has not heard from about a key out
// of what it divides, so a region on its fraction, or one whose nodes
// spend their unleased shares of a key the parent has not heard of yet,
// is never on top of what the parent granted the others.

// parentLeases are a region cluster's leases from the parent: each key's
// part of the allowance for this region. Like the allocator's, it is the
// leader's soft state: a new leader starts on the static fractions until
// its first exchange with the parent.
type parentLeases struct {
	mu sync.Mutex
	m  map[poolKey]*parentLease
	// told is, per key, the demand last reported to the parent (per
	// period); lastEarly is when the last early report went, followUntil
	// until when keys whose demand outruns their lease are reported early
	// again, and releaseUntil until when keys leased well above their
	// demand are (ns; see EarlyDemand, tierearly.go).
	told                                 map[poolKey]float64
	lastEarly, followUntil, releaseUntil int64
	// confirm is set when a lease was lowered and not reported held yet:
	// the next early check sends it, however soon after the last.
	confirm bool
}

// reset forgets the leases and what was reported, for a new leader.
func (l *parentLeases) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.m)
	clear(l.told)
	l.lastEarly, l.followUntil, l.releaseUntil, l.confirm = 0, 0, 0, false
}

// ResetParent forgets the leases from the parent and what was reported
// to it, for a new leader: until its first exchange with the parent, it
// divides the static fractions. It does nothing on a cluster that leases
// from no parent.
func (a *Allocator) ResetParent() {
	if a.parent != nil {
		a.parent.reset()
	}
}

// parentLease is one key's lease from the parent.
type parentLease struct {
	limit   float64 // per period, for the region
	next    float64 // window rules: the count from the next window on
	window  int64   // window rules: the window limit is for, ns
	expires int64   // ns, this cluster's clock
	epoch   uint64
	seq     uint64
	// lowered marks a lease smaller than the one it replaced, not yet
	// reported held: the parent counts the larger one until a report
	// says the region holds this one, so the region says so early (see
	// EarlyDemand).
	lowered bool
}

// maxRegionGroups bounds the shard groups of one region a parent keeps
// track of, per region and per key. A region's credential names its
// groups itself (reporter_group), so without a bound it could grow the
// parent's memory by naming ever new ones; a region has a few groups.
const maxRegionGroups = 64

// sawRegion records, on a parent, that a region (its shard group, ""
// for a region never split) reported a pool's key. A region naming more
// than maxRegionGroups groups for the key loses the entry of the one
// heard from longest ago: if that group fell silent, its region's share
// of the key is no longer held back for it (fallenRegions), which only a
// region misnaming its own groups can bring about.
func (p *pool) sawRegion(region, group string, now int64) {
	if p.regionSeen == nil {
		p.regionSeen = map[string]int64{}
	}
	key := regionGroup(region, group)
	if _, ok := p.regionSeen[key]; !ok {
		makeRoom(p.regionSeen, maxRegionGroups, func(k string) bool { r, _ := regionOf(k); return r == region })
	}
	p.regionSeen[key] = now
}

// sawGroup records, on a parent, that a shard group of a region ("" for a
// region never split) reported, keeping at most maxRegionGroups groups:
// an entry older than a lease period answers nothing regionReportedSince
// asks, so those go first, then the oldest.
func (n *nodeInfo) sawGroup(group string, now, ttl int64) {
	if n.groupSeen == nil {
		n.groupSeen = map[string]int64{}
	}
	if _, ok := n.groupSeen[group]; !ok && len(n.groupSeen) >= maxRegionGroups {
		for g, last := range n.groupSeen {
			if now-last >= ttl {
				delete(n.groupSeen, g)
			}
		}
		makeRoom(n.groupSeen, maxRegionGroups, nil)
	}
	n.groupSeen[group] = now
}

// makeRoom deletes from m, when it holds limit or more keys that match
// (every key, with match nil), the one of them seen longest ago, so that
// one more fits.
func makeRoom(m map[string]int64, limit int, match func(string) bool) {
	n, oldest, at := 0, "", int64(math.MaxInt64)
	for k, seen := range m {
		if match != nil && !match(k) {
			continue
		}
		n++
		if seen < at || seen == at && k < oldest {
			oldest, at = k, seen
		}
	}
	if n >= limit {
		delete(m, oldest)
	}
}

// regionGroup keys a region's shard group; regionOf takes it apart.
func regionGroup(region, group string) string {
	if group == "" {
		return region
	}
	return region + "\x00" + group
}

func regionOf(key string) (region, group string) {
	region, group, _ = strings.Cut(key, "\x00")
	return region, group
}

// tiered reports whether a rule's allowance is divided by the parent: it
// is divided among regions, and this cluster leases from a parent.
func (a *Allocator) tiered(r *rules.Rule) bool {
	return a.parent != nil && len(r.Regions) > 0 && !r.Local && !r.Unlimited
}

// tieredPools calls fn for every pool the parent divides, each under its
// shard's lock.
func (a *Allocator) tieredPools(fn func(sh *allocShard, k poolKey, p *pool)) {
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for k, p := range sh.pools {
			if a.tiered(p.rule) {
				fn(sh, k, p)
			}
		}
		sh.mu.Unlock()
	}
}

// poolLimit is what a pool divides among the cluster's nodes: a parent's
// whole limit; else the region's lease from the parent while it holds one;
// else the region's static fraction of limit.
func (a *Allocator) poolLimit(k poolKey, r *rules.Rule, limit int64, window, now int64) float64 {
	if a.global {
		return float64(limit)
	}
	static := r.RegionLimit(limit, a.region)
	if !a.tiered(r) {
		return static
	}
	a.parent.mu.Lock()
	defer a.parent.mu.Unlock()
	l := a.parent.m[k]
	if l == nil || now >= l.expires {
		return static
	}
	if r.Algorithm.Windowed() && window > l.window && l.next > 0 {
		return l.next
	}
	return l.limit
}

// onFallback reports whether a tiered pool divides its static fraction
// because it holds no current lease from the parent.
func (a *Allocator) onFallback(k poolKey, now int64) bool {
	a.parent.mu.Lock()
	defer a.parent.mu.Unlock()
	l := a.parent.m[k]
	return l == nil || now >= l.expires
}

// RefreshLimits brings every tiered pool's limit up to date with the
// parent's leases at now (a lease that arrived, or expired), and marks a
// pool whose limit changed for division. It returns how many tiered pools
// are on their static fraction.
func (a *Allocator) RefreshLimits(now int64) (fallback int) {
	if a.parent == nil {
		return 0
	}
	a.tieredPools(func(sh *allocShard, k poolKey, p *pool) {
		limit := a.poolLimit(k, p.rule, p.ruleLimit, p.window, now)
		if limit != p.limit {
			p.limit = limit
			sh.markDirty(p)
		}
		if a.onFallback(k, now) {
			fallback++
		}
	})
	return fallback
}

// fallenRegions is, on a parent, the part of a pool's limit that regions
// on their static fractions hold: the fractions of the regions that
// reported the key and have been silent since for a lease period, whose
// leases from the parent have expired. They divide their fractions
// unseen; the parent divides only the rest. A region that never reported
// the key reserves nothing: its nodes spend their unleased shares of it
// until their cluster reports it, as nodes do in a region for a key its
// cluster has not heard of (docs/regions.md).
//
// A region that still reports, but no longer this key, is not on its
// fraction: a region reports every key it divides, on its fraction or
// not, so its cluster has forgotten the key (its nodes' traffic went
// elsewhere and they gave their leases up). It is a region that never
// reported the key, and reserves nothing. Counting it fallen took its
// third from the region the traffic had moved to, a minute after every
// move (follow-the-sun: 67% of the quota for the last seconds of the run).
//
// A region split into shard groups reports each key from the group owning
// its slot: what counts is whether that group is in touch, not the region
// (another of its groups reporting says nothing of the one that divides
// the key). A region is counted once, however many of its groups fell.
func (a *Allocator) fallenRegions(p *pool, now int64) float64 {
	var fallen map[string]bool
	ttl := a.ttl.Load()
	for key, seen := range p.regionSeen {
		if now-seen < ttl {
			continue
		}
		region, group := regionOf(key)
		if a.regionReportedSince(region, group, seen, now) {
			delete(p.regionSeen, key)
			continue
		}
		if fallen == nil {
			fallen = map[string]bool{}
		}
		fallen[region] = true
	}
	total := 0.0
	for region := range fallen {
		total += p.rule.Regions[region] * p.limit
	}
	return total
}

// regionReportedSince reports whether, on a parent, a region's shard
// group ("" for a region never split) has reported within the last lease
// period, after seen: it is in touch, and a key it reported at seen and
// not since is no longer one it divides.
func (a *Allocator) regionReportedSince(region, group string, seen, now int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	info := a.nodes[RegionNode(region)]
	if info == nil {
		return false
	}
	last := info.groupSeen[group]
	return last > seen && now-last < a.ttl.Load()
}

// RegionDemand is the region's report to the parent: for every tiered
// pool, the demand its nodes reported (their smoothed estimates, summed,
// as a count over interval), what it holds from the parent, and, for
// window rules, what its nodes have spent in the window. Fair rules are
// reported as one class: within the region their tenants are divided by
// weight; between regions, by demand.
func (a *Allocator) RegionDemand(now, interval int64) []*allotpb.KeyDemand {
	var out []*allotpb.KeyDemand
	told := map[poolKey]float64{}
	a.tieredPools(func(_ *allocShard, k poolKey, p *pool) {
		d, est := a.keyDemand(k, p, now, interval)
		out = append(out, d)
		told[k] = est
	})
	a.parent.mu.Lock()
	a.parent.told = told // and a pool forgotten since is forgotten here
	a.parent.mu.Unlock()
	sortDemand(out)
	return out
}

// keyDemand is one tiered pool's part in a report to the parent, and the
// demand it tells, per period.
func (a *Allocator) keyDemand(k poolKey, p *pool, now, interval int64) (*allotpb.KeyDemand, float64) {
	d := &allotpb.KeyDemand{Rule: k.rule, Key: k.key, Tenant: p.tenant, Plan: p.plan, WindowUnixNano: p.window, IntervalNano: interval,
		Limit: p.own.limit, PeriodNano: int64(p.own.period), Burst: p.own.burst}
	est, committed := a.regionEst(p, now)
	d.Admitted = est * float64(interval) / float64(p.rule.Period)
	if p.rule.Algorithm.Windowed() {
		d.Committed = committed
	}
	a.parent.mu.Lock()
	defer a.parent.mu.Unlock()
	if l := a.parent.m[k]; l != nil && now < l.expires {
		d.Held, d.HeldEpoch, d.HeldSeq, d.NextHeld = l.limit, l.epoch, l.seq, l.next
		l.lowered = false
	} else {
		// On its static fraction the region holds that: a parent
		// counting it as holding nothing would grant the others
		// what the region divides until its lease comes back.
		d.Held, d.NextHeld = p.limit, p.limit
	}
	return d, est
}

func sortDemand(out []*allotpb.KeyDemand) {
	slices.SortFunc(out, func(x, y *allotpb.KeyDemand) int {
		if x.GetRule() != y.GetRule() {
			return compareStrings(x.GetRule(), y.GetRule())
		}
		return compareStrings(x.GetKey(), y.GetKey())
	})
}

// regionEst is a pool's demand in the region (its present nodes'
// smoothed estimates, summed, per period) and what its nodes have spent
// in the current window.
func (a *Allocator) regionEst(p *pool, now int64) (est, committed float64) {
	for _, c := range p.classes {
		for _, cl := range c.claims {
			if cl.lastSeen > 0 && now-cl.lastSeen < 2*a.interval.Load() {
				est += cl.est
			}
			committed += cl.committed
		}
	}
	return est, committed
}

func compareStrings(x, y string) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// ApplyParent takes the parent's answer at now: new leases replace those
// held, and the answer's renewal extends those it did not resend. It
// reports whether a lease was lowered (or replaced the static fraction):
// the region should say at once that it holds it. Times
// in the answer are on the parent's clock and are carried over as spans
// from its coordinator_unix_nano.
func (a *Allocator) ApplyParent(resp *allotpb.ReportResponse, now int64) (lowered bool) {
	a.parent.mu.Lock()
	if renew := resp.GetRenewUnixNano(); renew > 0 {
		// Renewal is on the parent's clock; this cluster's differs by the
		// offset the exchange shows, which the caller has folded into now.
		for _, l := range a.parent.m {
			if l.epoch == resp.GetEpoch() {
				l.expires = max(l.expires, now+(renew-resp.GetCoordinatorUnixNano()))
			}
		}
	}
	for _, l := range resp.GetLeases() {
		k := poolKey{l.GetRule(), l.GetKey()}
		old := a.parent.m[k]
		if old != nil && old.epoch == l.GetEpoch() && old.seq >= l.GetSeq() {
			continue
		}
		// A lease of nothing is the region's part while others have the
		// demand: it holds, unlike an agent's, which returns the agent to
		// its unleased share.
		expires := now + (l.GetExpiresUnixNano() - resp.GetCoordinatorUnixNano())
		nl := &parentLease{limit: max(l.GetLimit(), 0), next: max(l.GetNextLimit(), 0), window: l.GetWindowUnixNano(),
			expires: expires, epoch: l.GetEpoch(), seq: l.GetSeq()}
		// The first lease replaces the static fraction, which is what the
		// parent counts the region as holding until told otherwise.
		nl.lowered = old == nil || nl.limit < old.limit || nl.next < old.next || old.lowered
		lowered = lowered || nl.lowered
		a.parent.m[k] = nl
	}
	a.parent.confirm = a.parent.confirm || lowered
	a.parent.mu.Unlock()
	a.RefreshLimits(now)
	return lowered
}

// TierCounts is how many tiered pools hold a current lease from the
// parent, and how many divide their static fraction.
func (a *Allocator) TierCounts(now int64) (leased, fallback int) {
	a.tieredPools(func(_ *allocShard, k poolKey, _ *pool) {
		if a.onFallback(k, now) {
			fallback++
		} else {
			leased++
		}
	})
	return leased, fallback
}

// RegionsHeard lists, on a parent, the regions that have reported, with
// when each last did.
func (a *Allocator) RegionsHeard() []*allotpb.TierRegion {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*allotpb.TierRegion
	for _, info := range a.nodes {
		if info.region != "" {
			out = append(out, &allotpb.TierRegion{Region: info.region, LastSeenUnixNano: info.lastSeen})
		}
	}
	slices.SortFunc(out, func(x, y *allotpb.TierRegion) int { return compareStrings(x.GetRegion(), y.GetRegion()) })
	return out
}

// GrantKey names what a region's leader counts of its leases: a tenant's
// allowance under a rule in a billing window.
type GrantKey struct {
	Tenant, Rule string
	Window       int64 // Unix seconds
}

// MeterGrants adds, for every tiered pool keyed by the tenant, what the
// region was allowed between then and now (its pool's limit × the span ÷
// the rule's period) to acc, under the billing window of width windowNs
// that now falls in. A span longer than maxSpan (the leader was busy, or
// just started) counts only maxSpan: grants are a record, not a guess.
func (a *Allocator) MeterGrants(acc map[GrantKey]float64, then, now, windowNs, maxSpan int64) {
	span := min(now-then, maxSpan)
	if span <= 0 || windowNs <= 0 {
		return
	}
	window := now / windowNs * windowNs / int64(time.Second)
	a.tieredPools(func(_ *allocShard, k poolKey, p *pool) {
		if !p.rule.Fair() && TenantKey(p.rule) && p.tenant != "" {
			acc[GrantKey{p.tenant, k.rule, window}] += p.limit * float64(span) / float64(p.rule.Period)
		}
	})
}

// TenantKey reports whether a rule's key is the tenant alone, so that a
// pool's limit is the tenant's allowance.
func TenantKey(r *rules.Rule) bool {
	attrs := r.KeyAttrs()
	return len(attrs) == 1 && attrs[0] == rules.AttrTenant
}
