package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/fleet"
)

// scenario is one measurement: a rule of its own (matched by a plan named
// after the scenario, so scenarios share a cluster without sharing keys),
// the streams that meet it, and what happens to the fleet meanwhile.
type scenario struct {
	name     string
	rule     fleet.Rule
	streams  []*stream
	warmup   time.Duration // left out of worst and average, per key from its first check
	duration time.Duration // of the load, unless event ends it later
	// event runs from eventAt while the load runs; the load then goes on
	// for tail after it returns.
	event   func(ctx context.Context, r *runner) error
	eventAt time.Duration
	tail    time.Duration
	// sim is the comparable `allot sim` scenario; nil when there is none.
	sim *simEvents
	// newTenants: the first seconds of each tenant count toward the worst.
	newTenants bool
}

// simEvents is what the simulator is told besides the rule and the rate.
type simEvents struct {
	failoverAt time.Duration // 0: none
	// restarts: node i's process is replaced at restarts[i].
	restarts []time.Duration
	// arrival: tenant i starts at lead + i × arrival, after lead, a
	// warm-up with one tenant of its own that the simulator's fleet (cold
	// at its start, unlike the real one) spends learning its size.
	arrival, lead time.Duration
}

// quota is the rule every scenario's limit derives from: 600 per second.
const (
	quotaLimit = 600
	offered    = 2 // each tenant offers twice its limit
)

// settings shape every scenario.
type settings struct {
	steady, warmup time.Duration
	killDown       time.Duration
}

// scenarios returns every scenario for a fleet of n sidecars.
func scenarios(st settings, n int) []*scenario {
	var out []*scenario
	rate := float64(offered * quotaLimit)
	one := func(name string, r fleet.Rule, d time.Duration) *scenario {
		r.Name, r.Scope, r.Plans = name, "tenant", []string{name}
		if r.Intent == "" {
			r.Intent = "quota"
		}
		return &scenario{name: name, rule: r, warmup: st.warmup, duration: d, sim: &simEvents{},
			streams: []*stream{{Tenant: name + "-0", Plan: name, Key: name + "-0", Rate: rate, Stop: d, Bin: binOf(r), Window: r.Algorithm == "fixed_window"}}}
	}
	for _, alg := range []string{"fixed_window", "token_bucket", "sliding_window", "gcra"} {
		r := fleet.Rule{Algorithm: alg, Limit: quotaLimit, Period: time.Second}
		if alg == "gcra" {
			// Strictly spaced (burst 0), even one exact counter admits
			// two thirds of the limit to random arrivals at twice it:
			// every gap longer than the spacing is lost. A tenth of a
			// second of burst is what a quota would be given.
			r.Burst = quotaLimit / 10
		}
		out = append(out, one("steady-"+alg, r, st.steady))
	}
	// A 10 s window: three windows after a warm-up of one.
	w10 := one("steady-fixed_window-10s", fleet.Rule{Algorithm: "fixed_window", Limit: 10 * quotaLimit, Period: 10 * time.Second}, 40*time.Second)
	w10.warmup = 10 * time.Second
	out = append(out, w10)

	capRule := fleet.Rule{Name: "capacity", Scope: "global", Algorithm: "token_bucket", Intent: "capacity",
		Limit: quotaLimit, Period: time.Second, Plans: []string{"capacity"}}
	capS := &scenario{name: "capacity", rule: capRule, warmup: st.warmup, duration: st.steady, sim: &simEvents{}}
	for i := range 4 {
		capS.streams = append(capS.streams, &stream{Tenant: fmt.Sprintf("capacity-%d", i), Plan: "capacity", Key: "capacity",
			Rate: rate / 4, Stop: st.steady, Bin: time.Second})
	}
	out = append(out, capS,
		one("abuse", fleet.Rule{Algorithm: "gcra", Intent: "abuse", Limit: quotaLimit, Period: time.Second}, st.steady))

	// New tenants: one every 4 s, each at twice its quota for 7 s from its
	// first check (at most two at once).
	nt := one("new-tenants", fleet.Rule{Algorithm: "fixed_window", Limit: quotaLimit, Period: time.Second}, 0)
	nt.streams, nt.newTenants = nil, true
	nt.sim = &simEvents{arrival: 4 * time.Second, lead: 4 * time.Second}
	for i := range 6 {
		start := time.Duration(4*i) * time.Second
		name := fmt.Sprintf("new-tenants-%d", i)
		nt.streams = append(nt.streams, &stream{Tenant: name, Plan: "new-tenants", Key: name, Rate: rate,
			Start: start, Stop: start + 7*time.Second, Bin: time.Second, Window: true})
		nt.duration = start + 7*time.Second
	}
	out = append(out, nt)

	kill := one("leader-kill", fleet.Rule{Algorithm: "fixed_window", Limit: quotaLimit, Period: time.Second}, 0)
	kill.eventAt, kill.tail = 8*time.Second, 10*time.Second
	kill.sim.failoverAt = kill.eventAt
	kill.duration = kill.eventAt + st.killDown + kill.tail
	kill.event = func(ctx context.Context, r *runner) error { return r.cl.KillLeader(ctx, st.killDown) }
	out = append(out, kill)

	// A rolling deploy under a fixed-window quota, and under a token
	// bucket's (whose replacement process cannot know its predecessor's
	// bucket).
	for _, alg := range []string{"fixed_window", "token_bucket"} {
		name := "rolling-deploy"
		if alg != "fixed_window" {
			name += "-" + alg
		}
		dep := one(name, fleet.Rule{Algorithm: alg, Limit: quotaLimit, Period: time.Second}, 0)
		dep.eventAt, dep.tail = 5*time.Second, 6*time.Second
		dep.duration = dep.eventAt + time.Duration(n)*3*time.Second + dep.tail
		// The real deploy takes about 1.4 s a sidecar: 200 ms out of the
		// load balancer's rotation, its restart, a second back in before
		// the next.
		for i := range n {
			dep.sim.restarts = append(dep.sim.restarts, dep.eventAt+time.Duration(i)*1400*time.Millisecond)
		}
		dep.event = func(ctx context.Context, r *runner) error { return r.rollingDeploy(ctx) }
		out = append(out, dep)
	}
	return out
}

// binOf is the span a rule's admissions are counted in: its window for a
// fixed window, else a second.
func binOf(r fleet.Rule) time.Duration {
	if r.Algorithm == "fixed_window" {
		return r.Period
	}
	return time.Second
}

// intent is the scenario's rule's intent.
func (s *scenario) intent() string { return s.rule.Intent }

// offeredRate is every stream's rate summed: the fleet's offered load
// while all stream.
func (s *scenario) offeredRate() float64 {
	var r float64
	for _, st := range s.streams {
		r += st.Rate
	}
	return r
}

// limitOf is the limit each key is measured against, per bin.
func (s *scenario) limitOf() int64 { return s.rule.Limit * int64(binOf(s.rule)/s.rule.Period) }

// runner runs scenarios on one cluster.
type runner struct {
	cl  *fleet.Cluster
	gen *generator
	log func(format string, args ...any)
}

// rollingDeploy SIGTERMs and restarts every sidecar in turn; the load
// generator stops sending to each before its SIGTERM and starts again
// once it answers /healthz.
func (r *runner) rollingDeploy(ctx context.Context) error {
	for i, s := range r.cl.Sidecars {
		r.gen.up[i].Store(false)
		if err := fleet.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
		start := time.Now()
		if err := s.Terminate(15 * time.Second); err != nil && !strings.Contains(err.Error(), "exit status") {
			return fmt.Errorf("stopping %s: %w", s.ID, err)
		}
		if err := s.Start(); err != nil {
			return fmt.Errorf("restarting %s: %w", s.ID, err)
		}
		if err := r.cl.WaitHTTP(ctx, s.Proc, s.URL("/healthz"), 30*time.Second); err != nil {
			return fmt.Errorf("%s after its restart: %w", s.ID, err)
		}
		r.gen.up[i].Store(true)
		r.log("rolling deploy: %s restarted in %.1fs", s.ID, time.Since(start).Seconds())
		if err := fleet.Sleep(ctx, time.Second); err != nil {
			return err
		}
	}
	return nil
}

// run runs one scenario and measures it.
func (r *runner) run(ctx context.Context, s *scenario) (figures, error) {
	r.gen.counts = &counts{bins: map[binKey]*bin{}}
	// Start on a whole bin, so a key's first bin is whole.
	width := binOf(s.rule)
	begin := time.Now().Add(500 * time.Millisecond).Truncate(width).Add(width)
	stop := make(chan struct{})
	var eventErr error
	streams := s.streams
	if s.event != nil {
		// The load goes on until the event is over and tail has passed.
		streams = make([]*stream, len(s.streams))
		for i, st := range s.streams {
			c := *st
			c.Stop = 10 * time.Minute
			streams[i] = &c
		}
		go func() {
			defer close(stop)
			if eventErr = fleet.Sleep(ctx, time.Until(begin.Add(s.eventAt))); eventErr != nil {
				return
			}
			if eventErr = s.event(ctx, r); eventErr != nil {
				return
			}
			eventErr = fleet.Sleep(ctx, s.tail)
		}()
	}
	limit := int64(s.offeredRate()*(s.duration+time.Minute).Seconds()) + 1000
	r.gen.run(ctx, begin, streams, limit, stop)
	end := time.Since(begin)
	if s.event != nil {
		<-stop
		if eventErr != nil {
			return figures{}, fmt.Errorf("%s: %w", s.name, eventErr)
		}
	}
	if err := ctx.Err(); err != nil {
		return figures{}, fmt.Errorf("%s: %w", s.name, err)
	}
	r.log("%s: %.0fs of load: %s", s.name, end.Seconds(), r.gen.counts)
	return measureReal(r.gen.counts, s, streams, begin, end), nil
}
