package main

import (
	"sync/atomic"
	"time"
)

// bindFraction is how much of its limit a key must have offered a rule
// for a refusal by that rule to be one where the rule really binds. Below
// it, the refusal is unwarranted: the fleet refused a key that stayed
// well within its limit. The 10% spare covers what is not the fleet's
// doing: a window's edges on two clocks, and a token bucket's or GCRA's
// refill within the span judged.
const bindFraction = 0.9

// windowRule is what the ledger keeps of a fixed-window rule (per
// minute): per key, what reached the rule and what it refused in each of
// the last two windows, by the window's parity.
type windowRule struct {
	reached, refused [2][]atomic.Int64
	window           [2]atomic.Int64 // the window (Unix minute) each parity holds; 0: none
}

func newWindowRule(keys int) *windowRule {
	w := &windowRule{}
	for p := range 2 {
		w.reached[p] = make([]atomic.Int64, keys)
		w.refused[p] = make([]atomic.Int64, keys)
	}
	return w
}

// ledger counts, for every rule and key, the checks that reached the rule
// (passed every rule before it) and those it refused, and judges each
// refusal against the key's limit over the rule's span: a minute window
// for the quotas, a line's interval for the rate rules. Workers add to it
// with atomics; the sampler judges and clears it.
type ledger struct {
	m *model
	// The rate rules: the global one (one key) and the per-user GCRA.
	globalReached, globalRefused atomic.Int64
	userReached, userRefused     []atomic.Int64
	// The window rules: tenant quota (key: tenant) and route quota (key:
	// tenant × routes + route).
	tenant, route *windowRule
	// measuring is set once the warm-up is over: refusals count from then.
	measuring atomic.Bool
}

func newLedger(m *model) *ledger {
	return &ledger{m: m, userReached: make([]atomic.Int64, m.users), userRefused: make([]atomic.Int64, m.users),
		tenant: newWindowRule(len(m.tenants)), route: newWindowRule(len(m.tenants) * m.routes)}
}

// record counts one check of tenant ti, user u, route r, decided at now:
// refusedBy is the rule that refused it (-1: admitted; nRules: refused by
// no rule, for want of rules or on a fail mode).
func (l *ledger) record(ti, u, r, refusedBy int, now time.Time) {
	win := now.Unix() / 60
	p := win & 1
	refused := l.measuring.Load()
	reaches := func(rule int) bool { return refusedBy < 0 || refusedBy >= rule }
	add := func(reached, ref *atomic.Int64, rule int) {
		reached.Add(1)
		if refused && refusedBy == rule {
			ref.Add(1)
		}
	}
	add(&l.globalReached, &l.globalRefused, ruleGlobal)
	if !reaches(ruleTenant) {
		return
	}
	l.tenant.window[p].Store(win)
	add(&l.tenant.reached[p][ti], &l.tenant.refused[p][ti], ruleTenant)
	if !reaches(ruleUser) {
		return
	}
	uk := l.m.tenants[ti].userBase + u
	add(&l.userReached[uk], &l.userRefused[uk], ruleUser)
	if !reaches(ruleRoute) {
		return
	}
	l.route.window[p].Store(win)
	rk := ti*l.m.routes + r
	add(&l.route.reached[p][rk], &l.route.refused[p][rk], ruleRoute)
}

// verdict is what a judgement found, per rule: refusals of keys that
// reached their limit (warranted), and of keys that stayed below
// bindFraction of it (unwarranted), with the keys of each.
type verdict struct {
	warranted, unwarranted         [nRules]int64
	warrantedKeys, unwarrantedKeys [nRules]int64
}

func (v *verdict) add(o verdict) {
	for r := range nRules {
		v.warranted[r] += o.warranted[r]
		v.unwarranted[r] += o.unwarranted[r]
		v.warrantedKeys[r] += o.warrantedKeys[r]
		v.unwarrantedKeys[r] += o.unwarrantedKeys[r]
	}
}

func (v *verdict) judge(rule int, reached, refused, allowance float64) {
	if refused <= 0 {
		return
	}
	if reached < bindFraction*allowance {
		v.unwarranted[rule] += int64(refused)
		v.unwarrantedKeys[rule]++
		return
	}
	v.warranted[rule] += int64(refused)
	v.warrantedKeys[rule]++
}

// judgeRates judges the rate rules over the span since the last call, and
// starts the next span.
func (l *ledger) judgeRates(span time.Duration) verdict {
	var v verdict
	secs := span.Seconds()
	lim, burst := l.m.limitOf(ruleGlobal, 0)
	v.judge(ruleGlobal, float64(l.globalReached.Swap(0)), float64(l.globalRefused.Swap(0)), lim*secs+burst)
	for ti := range l.m.tenants {
		t := &l.m.tenants[ti]
		lim, burst := l.m.limitOf(ruleUser, ti)
		for uk := t.userBase; uk < t.userBase+t.users; uk++ {
			reached, refused := l.userReached[uk].Swap(0), l.userRefused[uk].Swap(0)
			v.judge(ruleUser, float64(reached), float64(refused), lim*secs+burst)
		}
	}
	return v
}

// judgeWindows judges the windows that ended at least settle before now
// (all of them when final), and clears them for the window after next.
func (l *ledger) judgeWindows(now time.Time, settle time.Duration, final bool) verdict {
	var v verdict
	for p := range 2 {
		for _, w := range []struct {
			rule int
			wr   *windowRule
		}{{ruleTenant, l.tenant}, {ruleRoute, l.route}} {
			win := w.wr.window[p].Load()
			if win == 0 || (!final && now.Before(time.Unix((win+1)*60, 0).Add(settle))) {
				continue
			}
			for k := range w.wr.reached[p] {
				reached, refused := w.wr.reached[p][k].Swap(0), w.wr.refused[p][k].Swap(0)
				ti := k
				if w.rule == ruleRoute {
					ti = k / l.m.routes
				}
				lim, _ := l.m.limitOf(w.rule, ti)
				v.judge(w.rule, float64(reached), float64(refused), lim)
			}
			w.wr.window[p].CompareAndSwap(win, 0)
		}
	}
	return v
}
