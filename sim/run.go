package sim

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"
)

// Strategies are the strategies the simulator knows, in report order.
var strategyNames = []string{"central", "even-split", "quota-lease", "async-global"}

// staticRegions is quota-lease with regions and no parent: every region
// divides its static fraction, the baseline the tier between regions is
// measured against. It runs only for scenarios with regions, and by
// default for each of them.
const staticRegions = "static-regions"

// StrategyNames lists the strategies the simulator compares.
func StrategyNames() []string { return slices.Clone(strategyNames) }

// Options adjust a run.
type Options struct {
	// Strategies to run; empty means all.
	Strategies []string
	// Progress, when set, is called now and then with the fraction of the
	// run done, summed over strategies.
	Progress func(done float64)
}

// Run simulates a scenario under each strategy, on the same traffic, and
// returns their results in a fixed order. Strategies run in parallel, one
// per core; each is deterministic for the scenario's seed.
func Run(ctx context.Context, s *Scenario, opts Options) ([]*Result, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	names := opts.Strategies
	if len(names) == 0 {
		names = strategyNames
		if s.Regions != nil {
			names = append(slices.Clone(names), staticRegions)
		}
		if s.Shards != nil {
			names = shardStrategyNames
		}
	}
	for _, n := range names {
		switch {
		case slices.Contains(shardStrategyNames, n):
			if s.Shards == nil {
				return nil, fmt.Errorf("%w: strategy %s needs a scenario with shards", ErrInvalidScenario, n)
			}
		case n == staticRegions && s.Regions == nil:
			return nil, fmt.Errorf("%w: strategy %s needs a scenario with regions", ErrInvalidScenario, staticRegions)
		case n != staticRegions && !slices.Contains(strategyNames, n):
			return nil, fmt.Errorf("%w: unknown strategy %q (want %v, or %s with regions)", ErrInvalidScenario, n, strategyNames, staticRegions)
		}
	}
	results := make([]*Result, len(names))
	errs := make([]error, len(names))
	progress := make([]float64, len(names))
	var mu sync.Mutex
	report := func(i int, done float64) {
		if opts.Progress == nil {
			return
		}
		mu.Lock()
		progress[i] = done
		sum := 0.0
		for _, p := range progress {
			sum += p
		}
		mu.Unlock()
		opts.Progress(sum / float64(len(names)))
	}
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = runOne(ctx, s, name, func(done float64) { report(i, done) })
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	order := append(slices.Concat(strategyNames, shardStrategyNames), staticRegions)
	sort.SliceStable(results, func(i, j int) bool {
		return slices.Index(order, results[i].Strategy) < slices.Index(order, results[j].Strategy)
	})
	return results, nil
}

func newStrategy(name string, e *env) (strategy, error) {
	switch name {
	case "central":
		return newCentral(e)
	case "even-split":
		return newEvenSplit(e), nil
	case "quota-lease":
		return newQuotaLease(e, e.s.Regions != nil)
	case staticRegions:
		return newQuotaLease(e, false)
	case "async-global":
		return newAsyncGlobal(e), nil
	case shardGroups:
		return newShardLease(e, e.s.Shards.Groups, false)
	case oneGroup:
		return newShardLease(e, 1, false)
	case oneGroupUnlimited:
		return newShardLease(e, 1, true)
	}
	return nil, fmt.Errorf("%w: unknown strategy %q", ErrInvalidScenario, name)
}

// runOne drives one strategy through the scenario.
func runOne(ctx context.Context, s *Scenario, name string, progress func(float64)) (*Result, error) {
	e, err := newEnv(s)
	if err != nil {
		return nil, err
	}
	st, err := newStrategy(name, e)
	if err != nil {
		return nil, err
	}
	defer st.close()
	gen := newTraffic(s)
	m := newMeter(s, &e.rule)
	moved := movedTenants(e)
	var mm *meter
	if moved != nil {
		mm = newMeter(s, &e.rule)
	}
	events := slices.Clone(s.Events)
	slices.SortStableFunc(events, func(a, b Event) int { return int(a.At - b.At) })
	nodes, next := s.Nodes, 0
	var shares [][]float64
	nextSample, nextProgress := time.Duration(0), time.Duration(0)
	for gen.peek() < s.Duration {
		at := gen.peek()
		for next < len(events) && events[next].At <= at {
			ev := events[next]
			next++
			switch {
			case ev.Shift != nil:
				gen.shift(ev.Shift.Tenant)
			case ev.Join > 0 || ev.Leave > 0:
				nodes += ev.Join - ev.Leave
				gen.resize(nodes)
				st.advance(ev.At)
				st.fleet(ev.At, nodes)
			case ev.Failover:
				st.advance(ev.At)
				st.failover(ev.At)
			case ev.Skew != nil:
				st.advance(ev.At)
				st.skew(ev.Skew.Node, ev.Skew.By)
			case ev.Restart != nil:
				st.advance(ev.At)
				st.restart(ev.At, ev.Restart.Node)
			case ev.Move != nil:
				var in []int
				for n := range nodes {
					if n%s.Regions.Count == ev.Move.Region {
						in = append(in, n)
					}
				}
				gen.moveTo(ev.Move.Tenant, in)
			case ev.MoveSlots != nil:
				if q, ok := st.(*quotaLease); ok {
					st.advance(ev.At)
					q.moveSlots(ev.At, ev.MoveSlots)
				}
			}
		}
		for nextSample <= at {
			shares = append(shares, st.shares(nextSample))
			nextSample += s.Interval
		}
		if at >= nextProgress {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			progress(float64(at) / float64(s.Duration))
			nextProgress += time.Second
		}
		st.advance(at)
		r := gen.pop()
		ok := st.decide(r.at, r.node, r.tenant)
		m.record(r.at, r.tenant, ok)
		if moved != nil && moved[r.tenant] {
			mm.record(r.at, r.tenant, ok)
		}
	}
	st.advance(s.Duration)
	progress(1)
	res := m.result(name, s.Duration)
	res.Shares = shares
	if res.Requests > 0 {
		res.StoreRoundTripsPerRequest = float64(st.trips()) / float64(res.Requests)
	}
	res.CoordinatorMessagesPerSecond = float64(st.messages()) / s.Duration.Seconds()
	if q, ok := st.(*quotaLease); ok {
		if res.Shards = q.shardsResult(s.Duration); res.Shards != nil && moved != nil {
			res.Shards.MovedTenants, res.Shards.MovedCount = mm.result(name, s.Duration).During, len(moved)
		}
	}
	return res, nil
}
