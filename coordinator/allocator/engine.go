package allocator

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// Engine is a coordinator without Raft or network: the same allocation,
// the same ledger and the same answers, applied synchronously in one
// process, with time passed in. The simulator drives it in virtual time to
// study how leases converge; it is not a way to run Allot.
type Engine struct {
	cfg         EngineConfig
	incarnation uint64 // as a parent's node
	mu          sync.Mutex
	st          *state.State
	alloc       *Allocator
	// waiting are the reports submitted since the last round, answered
	// by the next (Submit).
	waiting []*engineReport
}

// EngineConfig configures an Engine.
type EngineConfig struct {
	// Region is the engine's region: a rule divided among regions is
	// divided here by its part for this region.
	Region string
	// Global makes the engine a parent: its nodes are regions' clusters,
	// among which it divides every rule's whole limit (see tier.go).
	Global bool
	// Parent makes the engine a region's cluster that leases the rules
	// divided among regions from a parent (RegionReport, ApplyParent),
	// rather than dividing their static fractions.
	Parent         bool
	ReportInterval time.Duration // default 1s
	LeaseTTL       time.Duration // default DefaultLeaseIntervals × ReportInterval
	RoundInterval  time.Duration // default DefaultRoundInterval(ReportInterval), as the coordinator's
	BillingWindow  time.Duration // default 1h
	Rules          []rules.Rule
	// Shards, when set, makes the engine one shard group of a split
	// region (engine_shards.go); nil is a region never split.
	Shards *EngineShards
}

// NewEngine returns an engine that has just become leader at now.
func NewEngine(cfg EngineConfig, now time.Time) (*Engine, error) {
	if cfg.ReportInterval == 0 {
		cfg.ReportInterval = DefaultReportInterval
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseIntervals * cfg.ReportInterval
	}
	if cfg.RoundInterval == 0 {
		cfg.RoundInterval = DefaultRoundInterval(cfg.ReportInterval)
	}
	if cfg.BillingWindow == 0 {
		cfg.BillingWindow = DefaultBillingWindow
	}
	set, err := rules.NewSet(1, cfg.Rules)
	if err != nil {
		return nil, fmt.Errorf("allocator: engine rules: %w", err)
	}
	e := &Engine{cfg: cfg, st: state.New(), incarnation: rand.Uint64(),
		alloc: New(Config{Region: cfg.Region, Global: cfg.Global, Parent: cfg.Parent, ReportInterval: cfg.ReportInterval, LeaseTTL: cfg.LeaseTTL})}
	e.st.SetRules(set)
	e.st.Apply(state.CmdSettings, &fsmpb.SettingsCommand{
		BillingWindowNano: int64(cfg.BillingWindow), ReportIntervalNano: int64(cfg.ReportInterval), LeaseTtlNano: int64(cfg.LeaseTTL),
	})
	if err := e.startShards(now); err != nil {
		return nil, err
	}
	e.Failover(now)
	return e, nil
}

// Failover makes the engine a new leader at now: a new epoch, all soft
// state forgotten, and learning mode for one lease period.
func (e *Engine) Failover(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	epoch := e.st.Apply(state.CmdEpoch, &fsmpb.EpochCommand{}).(uint64)
	e.alloc.Lead(epoch, now.UnixNano(), e.st.RecentNodes(now.Add(-2*e.cfg.LeaseTTL).UnixNano()))
	e.alloc.SetRules(e.st.Rules())
	if e.alloc.parent != nil {
		// A new leader holds no lease from the parent: its first
		// exchange brings them back.
		e.alloc.parent.reset()
		e.alloc.RefreshLimits(now.UnixNano())
	}
}

// RegionReport is the report a region's engine (EngineConfig.Parent)
// sends its parent at now, its demand counted over interval: it reports
// as one node, named for the region.
func (e *Engine) RegionReport(now time.Time, interval time.Duration) *allotpb.ReportRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: RegionNode(e.cfg.Region), Incarnation: e.incarnation,
		Region: e.cfg.Region, SentUnixNano: now.UnixNano(), IntervalNano: int64(interval),
		RulesVersion: e.st.Rules().Version(), Demand: e.alloc.RegionDemand(now.UnixNano(), int64(interval)),
	}
}

// RegionEarlyReport is the early report a region's engine sends its
// parent at now, ahead of its interval, or nil when none is due: the keys
// whose demand moved since the parent was told (see EarlyDemand). The
// caller checks RegionEarlyChecks times an interval, with at most
// RegionEarlyInFlight of these exchanges under way at once.
func (e *Engine) RegionEarlyReport(now time.Time, interval time.Duration) *allotpb.ReportRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	demand := e.alloc.EarlyDemand(now.UnixNano(), int64(interval))
	if demand == nil {
		return nil
	}
	return &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: RegionNode(e.cfg.Region), Incarnation: e.incarnation,
		Region: e.cfg.Region, SentUnixNano: now.UnixNano(), IntervalNano: int64(interval),
		RulesVersion: e.st.Rules().Version(), Demand: demand,
	}
}

// RegionEarlyChecks and RegionEarlyInFlight are how often a region's
// leader checks for an early report, a region interval, and how many
// early exchanges it has under way at most.
const (
	RegionEarlyChecks   = earlyChecks
	RegionEarlyInFlight = earlyInFlight
)

// RegionNode is the node name a region's cluster reports to its parent as.
func RegionNode(region string) string { return "region-" + region }

// ApplyParent takes the parent's answer to a RegionReport, at now.
func (e *Engine) ApplyParent(now time.Time, resp *allotpb.ReportResponse) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.alloc.ApplyParent(resp, now.UnixNano())
}

// ParentFallbacks is how many keys divided among regions the engine
// divides its static fraction of, holding no current lease from the
// parent.
func (e *Engine) ParentFallbacks(now time.Time) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.alloc.RefreshLimits(now.UnixNano())
}

// SetRules replaces the rule set, as an operator's put does; agents get
// it with their next answer.
func (e *Engine) SetRules(rs []rules.Rule) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	set, err := rules.NewSet(e.st.Rules().Version()+1, rs)
	if err != nil {
		return fmt.Errorf("allocator: engine rules: %w", err)
	}
	e.st.SetRules(set)
	e.alloc.SetRules(set)
	return nil
}

// Report answers an agent's report at now, applying its usage at once.
// When its answer waits for a round, as the leader's would, the round is
// run at now: what a leader whose next round came at once answers. Submit
// answers as the leader does, at the next Round.
func (e *Engine) Report(now time.Time, req *allotpb.ReportRequest) (resp *allotpb.ReportResponse, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, err := e.take(now, req)
	if err != nil {
		return nil, err
	}
	if x.f.Stale() {
		e.round(now)
	}
	return e.answer(now, x), nil
}

// Submit takes an agent's report at now, applying its usage at once, and
// answers it as the leader does: at once when the pools it reported stand
// divided, or else at the next Round, which all the reports submitted
// until then share. deliver gets the answer and when it was made.
func (e *Engine) Submit(now time.Time, req *allotpb.ReportRequest, deliver func(at time.Time, resp *allotpb.ReportResponse, err error)) {
	e.mu.Lock()
	x, err := e.take(now, req)
	if err == nil && x.f.Stale() {
		x.deliver = deliver
		e.waiting = append(e.waiting, x)
		e.mu.Unlock()
		return
	}
	var resp *allotpb.ReportResponse
	if err == nil {
		resp = e.answer(now, x)
	}
	e.mu.Unlock()
	deliver(now, resp, err)
}

// engineReport is a report the Engine took, until it is answered.
type engineReport struct {
	received time.Time // when it was submitted: the answer says so
	f        *Folded
	view     *state.View // the state as the report reads it, as the leader's does
	applied  bool
	acked    uint64
	deliver  func(time.Time, *allotpb.ReportResponse, error)
}

// take validates a report, applies its usage and folds its demand in, as
// the leader does before it answers.
func (e *Engine) take(now time.Time, req *allotpb.ReportRequest) (*engineReport, error) {
	// An engine's ledger keeps every window (retention 0), as a
	// coordinator's with KeepLedger.
	lim := ReportLimits(DefaultMaxReportKeys, 0, 0, time.Duration(e.st.BillingWindowSeconds())*time.Second, now)
	if err := ReportError(allotpb.ValidateReport(req, lim)); err != nil {
		return nil, err
	}
	if err := e.wrongGroup(req); err != nil {
		return nil, err
	}
	x := &engineReport{received: now}
	if b := req.GetUsage(); b != nil && b.GetSeq() > 0 {
		// An engine runs no maintenance, so it forgets no incarnation
		// and refuses no batch as stale (stale_before_unix_nano unset).
		res := e.st.Apply(state.CmdReports, &fsmpb.ReportsCommand{ProposedUnixNano: now.UnixNano(), Reports: []*fsmpb.AgentUsage{
			{Node: req.GetNode(), Incarnation: req.GetIncarnation(), Region: req.GetRegion(), Batch: b},
		}}).(*fsmpb.ReportsResult)
		if err := e.slotsMoved(res.GetMoved()); err != nil {
			return nil, err
		}
		x.applied, x.acked = true, res.GetAckedSeq()[0]
	}
	x.view = e.st.View()
	x.f = e.alloc.Take(x.view, e.home(), req, now.UnixNano())
	return x, nil
}

// answer builds a taken report's answer at now.
func (e *Engine) answer(now time.Time, x *engineReport) *allotpb.ReportResponse {
	resp := e.alloc.Reply(x.view, x.f, now, e.settings(), x.applied, x.acked)
	resp.ReceivedUnixNano = x.received.UnixNano()
	return resp
}

// Round re-divides the allowances that changed, as the leader does every
// round interval, and answers the reports submitted since the last.
func (e *Engine) Round(now time.Time) {
	e.mu.Lock()
	waiting := e.waiting
	e.waiting = nil
	e.round(now)
	answers := make([]*allotpb.ReportResponse, len(waiting))
	for i, x := range waiting {
		answers[i] = e.answer(now, x)
	}
	e.mu.Unlock()
	for i, x := range waiting {
		x.deliver(now, answers[i], nil)
	}
}

func (e *Engine) round(now time.Time) {
	e.alloc.RefreshLimits(now.UnixNano()) // leases from the parent that expired
	e.alloc.Tick(now.UnixNano())
}

func (e *Engine) settings() Settings {
	return Settings{BillingWindow: e.cfg.BillingWindow, ReportInterval: e.cfg.ReportInterval, LeaseTTL: e.cfg.LeaseTTL}
}

// RoundInterval is how often the caller should call Round.
func (e *Engine) RoundInterval() time.Duration { return e.cfg.RoundInterval }

// Learning reports whether the engine is in learning mode at now.
func (e *Engine) Learning(now time.Time) bool { return e.alloc.Learning(now.UnixNano()) }

// Usage returns the ledger's totals for a tenant under a rule, over all
// windows and regions.
func (e *Engine) Usage(tenant, rule string) (admitted, denied uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st.Ledger(func(l ledger.Line) bool {
		if l.Key.Tenant == tenant && l.Key.Rule == rule {
			admitted += l.Admitted
			denied += l.Denied
		}
		return true
	})
	return admitted, denied
}
