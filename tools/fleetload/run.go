package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/internal/fleet"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// point is one run: a fleet of a shape, loaded for a while.
type point struct {
	shape
	duration, warmup, every time.Duration
	reportInterval          time.Duration
	workers                 int
	seed                    uint64
	secure                  bool
	// overload, when above 1, multiplies the gateways (and with them the
	// reports, their entries and the checks) from overloadAt for
	// overloadFor, then drops back.
	overload                float64
	overloadAt, overloadFor time.Duration
}

// result is what a run measured.
type result struct {
	p       point
	model   *model
	lines   []line
	final   verdict // the windows still open at the end, judged then
	seconds []second
	// The overload's span, since the load began; zero without one.
	overOn, overOff time.Duration
	overErr         error
}

// agentToken names the agent token of a secured run, bound to gw-*.
const agentToken = "gateways"

// runPoint starts three coordinators in dir, N agents in this process,
// and the load; prints a line every p.every (when lines is set); and
// stops everything before it returns.
func runPoint(ctx context.Context, bin, dir string, p point, out io.Writer, lines bool, logf func(string, ...any)) (*result, error) {
	m, err := newModel(p.shape)
	if err != nil {
		return nil, err
	}
	for _, s := range m.describe() {
		logf("%s", s)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making %s: %w", dir, err)
	}
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := writeRulesFile(rulesPath, m.rules); err != nil {
		return nil, err
	}
	o := fleet.Options{Bin: bin, Dir: dir, RulesPath: rulesPath, ReportInterval: p.reportInterval, Logf: logf, Secure: p.secure}
	if p.secure {
		o.AgentTokens = map[string]string{agentToken: "gw-*"}
	}
	cl, err := fleet.New(o)
	if err != nil {
		return nil, err
	}
	defer cl.StopAll()
	logf("starting 3 coordinators (logs in %s)", filepath.Join(dir, "logs"))
	if err := cl.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting the coordinators: %w", err)
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "logs", "agents.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agents' log: %w", err)
	}
	defer logFile.Close()
	clockCtx, stopClock := context.WithCancel(context.Background())
	defer stopClock() // after every agent is closed (defers run last first)
	clk := newCoarseClock()
	go clk.run(clockCtx)
	r := &runner{p: p, m: m, cl: cl, logf: logf, clock: clk,
		log: hclog.New(&hclog.LoggerOptions{Output: logFile, Level: hclog.Warn, TimeFormat: time.RFC3339Nano})}
	defer r.closeAll()
	res := &result{p: p, model: m}
	extra := 0
	if p.overload > 1 {
		extra = int(float64(p.gateways)*p.overload+0.5) - p.gateways
	}
	slots := make([]*slot, p.gateways+extra)
	for i := range slots {
		slots[i] = &slot{id: fmt.Sprintf("gw-%04d", i+1), mix: &m.mixes[i%p.gateways]}
	}
	// The report calls are timed from the load's start, set below; until
	// then they are counted before it.
	r.calls = newReportCalls(p.reportInterval, time.Now().Add(time.Hour))
	logf("starting %d agents", p.gateways)
	base, err := r.startGateways(ctx, slots[:p.gateways])
	if err != nil {
		return nil, err
	}
	led := newLedger(m)
	gen := newGenerator(m, led, slots, p.workers)
	smp := newSampler(cl, gen, led, r.calls, logf)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	start := time.Now()
	r.calls.restart(start)
	gen.run(loadCtx, p.seed)
	for i, g := range base {
		slots[i].on(g.a, start)
	}
	logf("load on: %d gateways × %.0f checks/s; a line every %v, the first %v warm-up", p.gateways, p.rate, p.every, p.warmup)
	var over sync.WaitGroup
	if extra > 0 {
		over.Add(1)
		go func() {
			defer over.Done()
			res.overOn, res.overOff, res.overErr = r.overload(loadCtx, slots[p.gateways:], smp, start)
		}()
	}
	if lines {
		fmt.Fprintln(out, header())
	}
	tk := time.NewTicker(p.every)
	defer tk.Stop()
	last := start
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			stopLoad()
			gen.wait()
			over.Wait()
			return res, ctx.Err()
		case <-tk.C:
		}
		now := time.Now()
		l := smp.sample(ctx, r.live(), now, now.Sub(last))
		if took := time.Since(now); took > p.every/2 {
			logf("reading the figures took %v (the agents' registries %v, the coordinators %v): the harness is short of CPU, and lines come late",
				took.Round(time.Millisecond), l.agentsTook.Round(time.Millisecond), l.scrapeTook.Round(time.Millisecond))
		}
		l.at, l.measured = now.Sub(start), last.Sub(start) >= p.warmup
		if on, off := r.overSpan(); !on.IsZero() && last.Before(off) && now.After(on) {
			l.phase = fmt.Sprintf("×%g", p.overload)
		}
		last = now
		res.lines = append(res.lines, l)
		if lines {
			if n%20 == 0 {
				fmt.Fprintln(out, header())
			}
			fmt.Fprintln(out, l.format())
		}
		if now.Sub(start) >= p.warmup {
			led.measuring.Store(true)
		}
		if now.Sub(start) >= p.duration-p.every/2 {
			break
		}
	}
	stopLoad()
	gen.wait()
	over.Wait()
	res.final = led.judgeWindows(time.Now(), 0, true)
	res.seconds = r.calls.perSecond()
	return res, nil
}

// writeRulesFile writes the model's rules and reads them back as the
// coordinators will.
func writeRulesFile(path string, list []rules.Rule) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("rules file: %w", err)
	}
	if err := rules.WriteYAML(f, list); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("rules file: %w", err)
	}
	if _, err := rules.Load(path); err != nil {
		return fmt.Errorf("the model's rules file does not read back: %w", err)
	}
	return nil
}

// runner holds a run's agents.
type runner struct {
	p     point
	m     *model
	cl    *fleet.Cluster
	log   hclog.Logger
	logf  func(string, ...any)
	calls *reportCalls
	clock *coarseClock

	mu       sync.Mutex
	gateways map[string]*gateway
	on, off  time.Time // the overload's span
}

// startGateways starts an agent for each slot, each with its own
// registry and its own connections to the coordinators, and waits until
// all have the cluster's rules.
func (r *runner) startGateways(ctx context.Context, slots []*slot) ([]*gateway, error) {
	var gws []*gateway
	for _, s := range slots {
		reg := prometheus.NewRegistry()
		cfg := agent.Config{Coordinators: r.cl.GRPCAddrs(), NodeID: s.id, Registerer: reg, ReportInterval: r.p.reportInterval, Clock: r.clock,
			Logger: r.log.Named(s.id), DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(r.calls.interceptor())}}
		if r.cl.Creds != nil {
			cfg.CAFile, cfg.TokenFile = r.cl.Creds.CA, r.cl.Creds.Agents[agentToken]
		}
		a, err := agent.New(cfg)
		if err != nil {
			return gws, fmt.Errorf("agent %s: %w", s.id, err)
		}
		g := &gateway{id: s.id, a: a, reg: reg}
		r.mu.Lock()
		if r.gateways == nil {
			r.gateways = map[string]*gateway{}
		}
		r.gateways[s.id] = g
		r.mu.Unlock()
		gws = append(gws, g)
	}
	deadline := time.NewTimer(90 * time.Second)
	defer deadline.Stop()
	for _, g := range gws {
		select {
		case <-g.a.Ready():
		case <-ctx.Done():
			return gws, ctx.Err()
		case <-deadline.C:
			return gws, fmt.Errorf("agent %s got no rules in 90s", g.id)
		}
	}
	return gws, nil
}

// live are the running agents.
func (r *runner) live() []*gateway {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*gateway, 0, len(r.gateways))
	for _, g := range r.gateways {
		out = append(out, g)
	}
	return out
}

func (r *runner) overSpan() (on, off time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.on, r.off
}

// overload starts the extra gateways at overloadAt, stops them
// overloadFor later, and closes their agents. It returns the span the
// extra load was on, since start.
func (r *runner) overload(ctx context.Context, slots []*slot, smp *sampler, start time.Time) (on, off time.Duration, err error) {
	p := r.p
	if err := fleet.Sleep(ctx, time.Until(start.Add(p.overloadAt))); err != nil {
		return 0, 0, nil
	}
	r.logf("overload: starting %d more gateways (×%g) for %v", len(slots), p.overload, p.overloadFor)
	gws, err := r.startGateways(ctx, slots)
	if err != nil {
		r.closeGateways(gws, smp)
		return 0, 0, fmt.Errorf("starting the overload's gateways: %w", err)
	}
	t := time.Now()
	for i, g := range gws {
		slots[i].on(g.a, t)
	}
	r.mu.Lock()
	r.on, r.off = t, t.Add(p.overloadFor)
	r.mu.Unlock()
	if err := fleet.Sleep(ctx, p.overloadFor); err != nil {
		r.logf("overload cut short: %v", err)
	}
	for _, s := range slots {
		s.off()
	}
	d := time.Now()
	r.mu.Lock()
	r.off = d
	r.mu.Unlock()
	r.logf("overload: dropped back to %d gateways", p.gateways)
	r.closeGateways(gws, smp)
	return t.Sub(start), d.Sub(start), nil
}

// closeGateways closes agents at once, each within 10 s, counting what
// each counted since the last line (smp may be nil); its last report,
// sent as it closes, is not counted.
func (r *runner) closeGateways(gws []*gateway, smp *sampler) {
	var wg sync.WaitGroup
	for _, g := range gws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if smp != nil {
				// Before Close, which takes the agent's metrics away.
				smp.retire(g)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := g.a.Close(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				r.log.Warn("closing the agent", "node", g.id, "error", err)
			}
			r.mu.Lock()
			delete(r.gateways, g.id)
			r.mu.Unlock()
		}()
	}
	wg.Wait()
}

// closeAll closes every agent still open.
func (r *runner) closeAll() { r.closeGateways(r.live(), nil) }
