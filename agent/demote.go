package agent

import (
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/rules"
)

// idleLeasedReports is how many regular reports in a row a leased key may
// go without traffic before it gives its lease up and leaves the hot keys.
// Kept, every tenant ever seen under a coordinated rule stayed hot and
// leased, reported every interval: a sidecar's memory and reports grew
// with every tenant it had served (make soak found it, 84,000 hot keys
// after 13 minutes of new tenants). The coordinators forget the claim one
// lease period after the key is no longer reported; traffic that returns
// makes it hot again, as a new key.
const idleLeasedReports = 60

// takeCount takes a key's count since the last report. A check that
// passed a key and was refused by a later rule gives its cost back to the
// key; when the report took the cost in between, the count goes negative,
// and the coordinators refuse negative demand (the key's demand was
// quarantined, found by make soak: "demand[3399].admitted ... got -10").
// A negative count is carried to the next report instead.
func takeCount(c *atomic.Int64) float64 {
	v := c.Swap(0)
	if v < 0 {
		c.Add(v)
		return 0
	}
	return float64(v)
}

// countIdle counts a report with no traffic on the key since the last.
func (hk *hotKey) countIdle(now time.Time) {
	if hk.admitted.Load() == 0 && hk.denied.Load() == 0 {
		hk.idle++
		return
	}
	hk.idle, hk.lastActive = 0, now.UnixNano()
}

// idleLongEnough reports whether a key (or class) with a lease has been
// idle long enough to give it up: idleLeasedReports reports, and for a
// window rule a whole period since it last counted, so that the window it
// spent in is over, however windows align.
func (hk *hotKey) idleLongEnough(r *rules.Rule, now time.Time) bool {
	if hk.idle <= idleLeasedReports {
		return false
	}
	last := hk.lastActive
	if last == 0 {
		last = hk.since
	}
	return !r.Algorithm.Windowed() || now.UnixNano()-last >= int64(r.Period)
}

// demote returns hot keys that have been idle for a while to the unleased
// store: those without a lease after 30 reports, those with one after
// idleLeasedReports. A window rule's leased key waits, in addition, a
// whole period after it last counted, so that the window it spent in is
// over and it never spends a second, unleased share of it.
func (rs *ruleState) demote(a *Agent, now time.Time) {
	m := *rs.hot.Load()
	var idle, release []algo.Hash
	for h, hk := range m {
		hk.countIdle(now)
		switch {
		case hk.idle > 30 && !hk.leased.Load():
			idle = append(idle, h)
		case hk.leased.Load() && hk.idleLongEnough(hk.store.ruleOf(rs), now):
			release = append(release, h)
		}
	}
	if rs.fair != nil {
		rs.fair.demoteClasses(rs, now)
	}
	if len(idle) == 0 && len(release) == 0 {
		return
	}
	for _, h := range release {
		m[h].unlease(rs, now)
	}
	next := make(map[algo.Hash]*hotKey, len(m))
	for h, hk := range m {
		next[h] = hk
	}
	for _, h := range append(idle, release...) {
		hk := next[h]
		delete(rs.byKey, hk.key)
		delete(next, h)
		// Given back before the hot keys without it are published, so
		// that a check sent here by the store (HandedOver) finds either
		// the hot key or the store deciding again.
		hk.store.keyed.TakeBackHash(h)
	}
	rs.hot.Store(&next)
}
