package allocator

import (
	"math"

	allotpb "github.com/allot-io/allot/proto"
)

// Early reports from a region to its parent. Waiting for its interval, a
// move of a tenant's traffic from one region to another took about 5 s,
// two to three parent intervals, to hand over in the simulator's
// follow-the-sun: the new region's nodes
// spent their unleased shares while it waited for its report, then for
// the old region's report that its demand had gone (the hand-over guard
// grants no increase before that decrease is confirmed), then for its own
// next report to hear of the increase, the parent answering only reports.
// So a region's leader checks earlyChecks times an interval whether a
// key's demand has moved since it last told the parent, and if so reports
// that key at once, as an agent reports a key running low: the increase is
// asked for when the demand outgrows the lease, the decrease is offered
// when it falls away, and each confirmed decrease lets the next early
// report of the region that gained collect the increase.

// earlyChecks is how many times a parent interval a region's leader
// checks for an early report, and so the most it sends an interval.
const earlyChecks = 16

// earlyInFlight bounds a region leader's early exchanges under way at
// once. They do not wait for each other's answers: an answer takes a
// round trip between regions (200–400 ms in the simulator), and the region
// that gained collects the decreases the others confirm one after another;
// with one at a time follow-the-sun admitted 98.3–98.6% of the quotas
// (seeds 11, 13, 17), with four 98.8%.
const earlyInFlight = 4

// earlyMove is the least change of a key's demand, as a fraction of the
// key's whole limit, worth an early report: smaller moves wait for the
// next regular one.
const earlyMove = 0.1

// earlyCarry is, as a fraction of a key's whole limit, how far its
// demand must have moved since the parent was told for an early report,
// once due, to carry it too: the report carries what changed, not every
// key the region divides. (Carried only when they crossed earlyMove, the
// decreases of a region that both lost a tenant and gained another
// reached the parent in coarser steps: 98.7% of the quotas over
// follow-the-sun rather than 98.8%, 3.3–3.7% wrongful denials rather
// than 2.7%.)
const earlyCarry = 0.01

// EarlyDemand is the region's early report at now, a parent interval
// being interval (ns), or nil when none is due. One is due when a key's
// demand, since the parent was last told of it, moved by more than the
// estimator's noise band and earlyMove of the key's limit, and
//
//   - outgrew what the region divides: the increase is asked for at once;
//     then for an interval every key whose demand still outruns what the
//     region divides is reported again at every check, so that it is
//     granted as the other regions' decreases are confirmed;
//   - or fell: the decrease frees the allowance for the others at once;
//     then for an interval every key the region is leased well above its
//     demand is reported again at every check. The parent takes a lease
//     back in the round after another region asks for it, which may come
//     after this report's answer; a lowered lease reaches a region only in
//     an answer, and the other region's increase waits for its
//     confirmation. Without these reports the region that lost its demand
//     heard of its lowered lease at its next regular report, a parent
//     interval later, and the region that gained waited as long (on real
//     clusters, TestTierClustersReportEarly: the quota stuck half in each
//     region for the rest of the interval in about one run in ten);
//   - or the parent lowered its lease: the parent counts the region as
//     holding the larger one until a report says it holds the smaller
//     (the answer could have been lost), and the others' increases wait
//     for that.
//
// One is due too for a key the parent has not heard of from the region
// whose demand is well below the region's static fraction. It carries
// those keys and every other whose demand moved by more than earlyCarry
// of its limit. None is due less than half a check (interval ÷
// earlyChecks) after the last: a region whose demand stays where it was,
// contended or not, reports once an interval as before. The report is a
// regular one, not urgent: the parent must be able to lower an estimate
// from it.
func (a *Allocator) EarlyDemand(now, interval int64) []*allotpb.KeyDemand {
	if a.parent == nil || a.global {
		return nil
	}
	a.parent.mu.Lock()
	// Half a check apart: a ticker's check a hair early is not skipped.
	// A lowered lease is confirmed at once: the other regions' increases
	// wait for it.
	wait := now-a.parent.lastEarly < interval/(2*earlyChecks) && !a.parent.confirm
	following := now < a.parent.followUntil
	releasing := now < a.parent.releaseUntil
	a.parent.confirm = false
	a.parent.mu.Unlock()
	if wait {
		return nil
	}
	band := 1 + a.est.Band
	var out []*allotpb.KeyDemand
	told := map[poolKey]float64{}
	rose, fell, due := false, false, false
	a.tieredPools(func(_ *allocShard, k poolKey, p *pool) {
		est, _ := a.regionEst(p, now)
		a.parent.mu.Lock()
		before, known := a.parent.told[k]
		a.parent.mu.Unlock()
		limit := float64(p.ruleLimit)
		outruns := est > p.limit+earlyMove*limit
		moved := math.Abs(est-before) > earlyMove*limit
		up := outruns && moved && est > before*band
		down := moved && est*band < before
		// A key the parent has not heard of from the region, whose demand
		// is well below the region's static fraction: told, the parent
		// can lease the region less and the others the rest (until then
		// it counts the region's nodes as spending their unleased shares).
		fresh := !known && est < p.limit-earlyMove*limit
		a.parent.mu.Lock()
		lowered := a.parent.m[k] != nil && a.parent.m[k].lowered
		a.parent.mu.Unlock()
		rose, fell = rose || up, fell || down
		follow := following && outruns
		// Leased well above its demand, a key may be lowered by the
		// round after another region's report: ask for the answer.
		release := releasing && est*band < p.limit-earlyMove*limit
		due = due || up || down || follow || release || fresh || lowered
		if up || down || follow || release || fresh || lowered || math.Abs(est-before) > earlyCarry*limit {
			d, tell := a.keyDemand(k, p, now, interval)
			out = append(out, d)
			told[k] = tell
		}
	})
	if !due {
		return nil
	}
	a.parent.mu.Lock()
	a.parent.lastEarly = now
	if rose {
		a.parent.followUntil = now + interval
	}
	if fell {
		a.parent.releaseUntil = now + interval
	}
	if a.parent.told == nil {
		a.parent.told = map[poolKey]float64{}
	}
	for k, est := range told {
		a.parent.told[k] = est
	}
	a.parent.mu.Unlock()
	sortDemand(out)
	return out
}
