package main

import (
	"context"
	"math"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/internal/fleet"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

var nan = math.NaN()

// Metric names the harness reads, by name, so that it keeps working as
// metrics are added: one that is absent reads as 0 (or, where 0 would
// mislead, prints as "-").
const (
	mReports     = "allot_coordinator_reports_total" // by result; "shed" when the leader sheds
	mReportKeys  = "allot_coordinator_report_keys"   // histogram: demand keys per report
	mRound       = "allot_coordinator_allocation_round_duration_seconds"
	mRaftState   = "allot_coordinator_raft_state"
	mGoroutines  = "go_goroutines"
	mAgentRep    = "allot_agent_reports_total" // by result: ok, failed
	mExpiries    = "allot_agent_lease_expiries_total"
	mFallback    = "allot_agent_fallback"
	resultShed   = "shed"
	resultOK     = "ok"
	resultFailed = "failed"
)

// gateway is one simulated gateway: a real agent.Agent with a registry of
// its own.
type gateway struct {
	id  string
	a   *agent.Agent
	reg *prometheus.Registry
}

// agentTotals are the counters the harness reads from one agent.
type agentTotals struct{ ok, failed, expiries float64 }

func (t agentTotals) sub(o agentTotals) agentTotals {
	return agentTotals{t.ok - o.ok, t.failed - o.failed, t.expiries - o.expiries}
}

func (t *agentTotals) add(o agentTotals) {
	t.ok, t.failed, t.expiries = t.ok+o.ok, t.failed+o.failed, t.expiries+o.expiries
}

// memberSample is one coordinator's state at one time: its /proc (CPU
// and memory) and its /metrics, either of which may fail (a loaded
// leader may not answer its /metrics in time; /proc always answers).
type memberSample struct {
	pid         int
	at          time.Time
	ps          fleet.ProcStat
	psOK        bool
	m           fleet.Metrics
	mOK         bool
	psAt, mAt   time.Time // when the kept ps and m were read
	scrapeError error
}

// line is one interval's figures. NaN is a figure that could not be
// had (no leader, or a leader without an earlier sample to subtract).
type line struct {
	at, span time.Duration // the end of the interval since the load began, and its length
	measured bool          // after the warm-up
	phase    string        // "", or the overload's ("×3", "after")
	leader   string
	changed  bool // the leader is not the last line's

	reportsOK, reportsFailed float64 // agents' report exchanges
	lat                      []float64
	byCode                   map[codes.Code]int64
	shed, leaderReports      float64
	byResult                 map[string]float64 // the leader's reports by result, whatever results it has
	entries, entriesReports  float64            // demand keys the leader received, in how many reports
	cpu, cpuSpan             float64            // the leader's CPU seconds, over how many seconds
	rss, goroutines          float64
	round                    fleet.Histogram
	expiries                 float64
	fallbackAgents           float64
	harnessCPU               float64 // this process's CPU seconds
	counts                   counts
	verdict                  verdict
	// How long reading the agents' registries and the coordinators
	// took, for a harness short of CPU to show.
	agentsTook, scrapeTook time.Duration
}

// sampler reads, each interval, the agents' registries, the report
// calls, every coordinator's metrics and /proc, the generator's counts
// and the ledger's verdicts, and makes them a line.
type sampler struct {
	cl      *fleet.Cluster
	http    *http.Client
	gen     *generator
	led     *ledger
	calls   *reportCalls
	members map[string]memberSample // the last good readings of each
	agents  map[string]agentTotals
	retired agentTotals     // what closed agents counted since their last sample
	gone    map[string]bool // closed agents, read no more
	prev    counts
	self    fleet.ProcStat
	leader  string
	logf    func(string, ...any)
	mu      sync.Mutex
}

func newSampler(cl *fleet.Cluster, gen *generator, led *ledger, calls *reportCalls, logf func(string, ...any)) *sampler {
	client := *cl.HTTP
	// A loaded leader answers its /metrics slowly: give it time rather
	// than lose the line.
	client.Timeout = 5 * time.Second
	s := &sampler{cl: cl, http: &client, gen: gen, led: led, calls: calls, logf: logf, members: map[string]memberSample{}, agents: map[string]agentTotals{}, gone: map[string]bool{}}
	s.self, _ = fleet.ReadProcStat(os.Getpid())
	return s
}

// readAgent reads one agent's counters.
func readAgent(g *gateway) agentTotals {
	m, _ := fleet.Gather(g.reg)
	return totalsOf(m)
}

func totalsOf(m fleet.Metrics) agentTotals {
	return agentTotals{ok: m.Sum(mAgentRep, "result", resultOK), failed: m.Sum(mAgentRep, "result", resultFailed), expiries: m.Sum(mExpiries)}
}

// retire counts what a gateway counted since its last sample, before it
// goes (its agent closed).
func (s *sampler) retire(g *gateway) {
	t := readAgent(g)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retired.add(t.sub(s.agents[g.id]))
	delete(s.agents, g.id)
	s.gone[g.id] = true
}

// sample makes the line of the interval that ends now.
func (s *sampler) sample(ctx context.Context, gws []*gateway, now time.Time, span time.Duration) line {
	l := line{span: span, cpu: nan, rss: nan, goroutines: nan, shed: nan, leaderReports: nan, entries: nan, entriesReports: nan}
	// First what this process counted, read as close to now as can be.
	c := s.gen.read()
	l.counts, s.prev = c.sub(s.prev), c
	l.lat, l.byCode = s.calls.take()
	l.verdict = s.led.judgeRates(span)
	l.verdict.add(s.led.judgeWindows(now, 2*time.Second, false))
	if ps, err := fleet.ReadProcStat(os.Getpid()); err == nil {
		l.harnessCPU, s.self = (ps.CPU - s.self.CPU).Seconds(), ps
	}
	// Then the coordinators, while the agents' registries are read.
	scraped := make(chan map[string]memberSample, 1)
	t0 := time.Now()
	go func() {
		m := s.scrapeMembers(ctx)
		l.scrapeTook = time.Since(t0)
		scraped <- m
	}()
	s.readAgents(&l, gws)
	l.agentsTook = time.Since(t0)
	samples := <-scraped
	leader, sure := s.findLeader(ctx, samples)
	l.leader, l.changed = leader, leader != s.leader && s.leader != ""
	switch {
	case leader == "":
		l.leader = "-"
	case !sure:
		l.leader += "?"
	}
	if leader != "" {
		s.leaderLine(&l, samples[leader], s.members[leader])
	}
	if leader != "" {
		s.leader = leader // the last known: a change is told against it
	}
	for id, ms := range samples {
		kept := s.members[id]
		if kept.pid != ms.pid {
			kept = memberSample{pid: ms.pid}
		}
		if ms.psOK {
			kept.ps, kept.psAt, kept.psOK = ms.ps, ms.at, true
		}
		if ms.mOK {
			kept.m, kept.mAt, kept.mOK = ms.m, ms.at, true
		}
		s.members[id] = kept
	}
	return l
}

// findLeader is the member whose /metrics says it leads. When none says
// so and some member did not answer, it asks /v1/status, and failing
// that takes the last leader, if it runs, as the one too busy to answer
// (sure is then false); when all answered and none leads, there is an
// election, and no leader.
func (s *sampler) findLeader(ctx context.Context, samples map[string]memberSample) (leader string, sure bool) {
	for id, ms := range samples {
		if ms.mOK && ms.m.Sum(mRaftState, "state", "Leader") == 1 {
			if leader != "" { // two say they lead: ask who leads now
				if co, _ := s.cl.Leader(ctx); co != nil {
					return co.ID, true
				}
			}
			leader = id
		}
	}
	if leader != "" {
		return leader, true
	}
	answered := true
	for id, ms := range samples {
		if ms.scrapeError != nil {
			answered = false
			s.logf("%s's /metrics: %v", id, ms.scrapeError)
		}
	}
	if answered {
		return "", true
	}
	if co, _ := s.cl.Leader(ctx); co != nil {
		return co.ID, true
	}
	if _, ok := samples[s.leader]; ok {
		return s.leader, false
	}
	return "", true
}

// readAgents adds up what the agents counted since the last line. The
// registries are read a few at a time: each Gather hands its metrics
// over channels, and on a busy machine each hand-over waits for the
// scheduler, which a hundred agents read one by one would pay a hundred
// times over.
func (s *sampler) readAgents(l *line, gws []*gateway) {
	s.mu.Lock()
	totals := s.retired
	s.retired = agentTotals{}
	s.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, g := range gws {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			m, _ := fleet.Gather(g.reg)
			t := totalsOf(m)
			fallback := false
			for _, v := range m.Values(mFallback, "rule") {
				fallback = fallback || m.Sum(mFallback, "rule", v) > 0
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.gone[g.id] { // retire counted it
				return
			}
			totals.add(t.sub(s.agents[g.id]))
			s.agents[g.id] = t
			if fallback {
				l.fallbackAgents++
			}
		}()
	}
	wg.Wait()
	l.reportsOK, l.reportsFailed, l.expiries = totals.ok, totals.failed, totals.expiries
}

// leaderLine fills the leader's figures in: gauges from now, counters as
// the difference from the last good reading of the same process.
func (s *sampler) leaderLine(l *line, now, prev memberSample) {
	same := prev.pid == now.pid
	if now.psOK {
		l.rss = float64(now.ps.RSS)
		if same && prev.psOK {
			l.cpu, l.cpuSpan = (now.ps.CPU - prev.ps.CPU).Seconds(), now.at.Sub(prev.psAt).Seconds()
		}
	}
	if !now.mOK {
		return
	}
	if now.m.Has(mGoroutines) {
		l.goroutines = now.m.Sum(mGoroutines)
	}
	if !same || !prev.mOK {
		return
	}
	l.leaderReports = now.m.Sum(mReports) - prev.m.Sum(mReports)
	l.byResult = map[string]float64{}
	for _, r := range now.m.Values(mReports, "result") {
		l.byResult[r] = now.m.Sum(mReports, "result", r) - prev.m.Sum(mReports, "result", r)
	}
	l.shed = now.m.Sum(mReports, "result", resultShed) - prev.m.Sum(mReports, "result", resultShed)
	keys := now.m.Histogram(mReportKeys).Sub(prev.m.Histogram(mReportKeys))
	l.entries, l.entriesReports = keys.Sum, keys.Count
	if now.m.Has(mRound) {
		l.round = now.m.Histogram(mRound).Sub(prev.m.Histogram(mRound))
	}
}

// scrapeMembers reads every running coordinator's /proc and /metrics at
// once.
func (s *sampler) scrapeMembers(ctx context.Context) map[string]memberSample {
	out := map[string]memberSample{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, co := range s.cl.Coords {
		pid := co.Pid()
		if pid == 0 || co.IsPaused() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms := memberSample{pid: pid, at: time.Now()}
			var err error
			ms.ps, err = fleet.ReadProcStat(pid)
			ms.psOK = err == nil
			ms.m, ms.scrapeError = fleet.Scrape(ctx, s.http, co.URL("/metrics"))
			ms.mOK = ms.scrapeError == nil
			mu.Lock()
			out[co.ID] = ms
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}
