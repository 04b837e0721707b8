package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/agent"
)

// slot is one gateway the generator drives: the agent it checks against
// and when its traffic began (nil while the gateway is off), and its
// traffic mix.
type slot struct {
	id  string
	mix *mix
	run atomic.Pointer[running]
}

// running is a gateway's agent and when its traffic began.
type running struct {
	a     *agent.Agent
	start time.Time
}

// on starts a gateway's traffic at now; off stops it.
func (s *slot) on(a *agent.Agent, now time.Time) { s.run.Store(&running{a, now}) }
func (s *slot) off()                             { s.run.Store(nil) }

// tally is one worker's counts, read by the sampler while the worker adds
// to them.
type tally struct {
	offered, admitted atomic.Int64
	refused           [nRules + 1]atomic.Int64 // by rule; the last: by no rule
	// dropped are checks the pacing gave up on because the worker fell
	// more than maxBehind behind: the generator could not offer its load.
	dropped atomic.Int64
	_       [64]byte // keep workers' tallies off each other's cache lines
}

// counts is a tally's values at one time.
type counts struct {
	offered, admitted, dropped int64
	refused                    [nRules + 1]int64
}

func (c counts) sub(o counts) counts {
	d := counts{offered: c.offered - o.offered, admitted: c.admitted - o.admitted, dropped: c.dropped - o.dropped}
	for i := range c.refused {
		d.refused[i] = c.refused[i] - o.refused[i]
	}
	return d
}

// generator offers each gateway rate checks a second, open loop: a few
// workers, each pacing its share of the gateways against the clock every
// tick, whatever the answers. A check is agent.Check on the gateway's own
// agent, for a tenant drawn from the gateway's mix, a user and a route
// drawn by Zipf, at batch priority with the model's probability.
type generator struct {
	m       *model
	led     *ledger
	rate    float64
	slots   []*slot
	tallies []*tally
	wg      sync.WaitGroup
	users   []string
	routes  []string
}

// tick is how often a worker paces its gateways; maxBehind how far
// behind it may catch up.
const (
	tick      = 5 * time.Millisecond
	maxBehind = 100 * time.Millisecond
)

func newGenerator(m *model, led *ledger, slots []*slot, workers int) *generator {
	g := &generator{m: m, led: led, rate: m.rate, slots: slots}
	for u := range m.maxUsers {
		g.users = append(g.users, fmt.Sprintf("u%03d", u+1))
	}
	for r := range m.routes {
		g.routes = append(g.routes, fmt.Sprintf("/v1/r%02d", r))
	}
	for range workers {
		g.tallies = append(g.tallies, &tally{})
	}
	return g
}

// run starts the workers; they stop when ctx ends (wait for them with
// wait).
func (g *generator) run(ctx context.Context, seed uint64) {
	n := len(g.tallies)
	for w := range n {
		var mine []*slot
		for i := w; i < len(g.slots); i += n {
			mine = append(mine, g.slots[i])
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.work(ctx, mine, g.tallies[w], rand.New(rand.NewPCG(seed, uint64(w))))
		}()
	}
}

func (g *generator) wait() { g.wg.Wait() }

// work paces slots until ctx ends.
func (g *generator) work(ctx context.Context, slots []*slot, t *tally, rng *rand.Rand) {
	type paced struct {
		run    *running
		issued int64
	}
	state := make([]paced, len(slots))
	tk := time.NewTicker(tick)
	defer tk.Stop()
	// A worker behind by more than maxBehind gives the rest up, counted
	// as dropped, rather than catch up in a burst: on a machine short of
	// CPU the generator must not starve the agents' reporters, whose
	// reports are what the harness measures.
	most := max(1, int64(g.rate*maxBehind.Seconds()))
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		now := time.Now()
		for i, s := range slots {
			run := s.run.Load()
			st := &state[i]
			if run == nil {
				continue
			}
			if st.run != run { // a gateway (re)started: pace from its start
				st.run, st.issued = run, 0
			}
			due := int64(g.rate*now.Sub(run.start).Seconds()) - st.issued
			if due > most {
				t.dropped.Add(due - most)
				st.issued += due - most
				due = most
			}
			for i := range due {
				g.check(run.a, s.mix, t, rng)
				if i%64 == 63 {
					// Let the agents' reporters run: on a machine short
					// of CPU a worker catching up would otherwise hold
					// its processor for whole time slices, and every
					// report the harness measures would wait behind it.
					runtime.Gosched()
				}
			}
			st.issued += due
		}
	}
}

// check offers one check and counts its answer.
func (g *generator) check(a *agent.Agent, mx *mix, t *tally, rng *rand.Rand) {
	m := g.m
	k, _ := slices.BinarySearch(mx.cum, rng.Float64())
	ti := int(mx.tenants[min(k, len(mx.tenants)-1)])
	tn := &m.tenants[ti]
	u := pick(m.userCum[:tn.users], rng)
	r := pick(m.routeCum, rng)
	pri := agent.Interactive
	if rng.Float64() < m.batch {
		pri = agent.Batch
	}
	now := time.Now()
	d := a.Check(agent.Request{Tenant: tn.name, Plan: tn.plan, User: g.users[u], Route: g.routes[r], Priority: pri})
	t.offered.Add(1)
	by := -1
	if d.Allowed {
		t.admitted.Add(1)
	} else {
		by = ruleIndex(d.Rule)
		t.refused[by].Add(1)
	}
	g.led.record(ti, u, r, by, now)
}

// pick draws a rank from a cumulative popularity.
func pick(cum []float64, rng *rand.Rand) int {
	k, _ := slices.BinarySearch(cum, rng.Float64()*cum[len(cum)-1])
	return min(k, len(cum)-1)
}

// ruleIndex is the index of the rule named, nRules for none.
func ruleIndex(name string) int {
	for i, n := range ruleNames {
		if n == name {
			return i
		}
	}
	return nRules
}

// read sums the workers' tallies.
func (g *generator) read() counts {
	var c counts
	for _, t := range g.tallies {
		c.offered += t.offered.Load()
		c.admitted += t.admitted.Load()
		c.dropped += t.dropped.Load()
		for i := range t.refused {
			c.refused[i] += t.refused[i].Load()
		}
	}
	return c
}
