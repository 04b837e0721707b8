package state

import (
	"fmt"
	"math"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/lease/rules"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/google/btree"
)

// DefaultBillingWindow is the billing window of a state whose settings no
// leader has fixed yet.
const DefaultBillingWindow = time.Hour

// State is everything the coordinators replicate: rules, members, the
// usage ledger, the report sequence of every agent incarnation, and the
// epoch. It knows nothing of Raft; the FSM decodes log entries and calls
// Apply, always from one goroutine, while readers hold the FSM's lock.
// Every method is a deterministic function of the state and its
// arguments: no clock is read here, so every replica reaches the same
// state from the same log.
type State struct {
	epoch uint64
	// The cluster's settings, in ns: 0 until a leader fixes them (see
	// applySettings); the first leader of a cluster does.
	billingWindow  int64
	reportInterval int64
	leaseTTL       int64
	rules          *rules.Set
	members        map[string]*allotpb.Member
	incarnations   map[incKey]*incarnation
	ledger         map[LedgerKey]*usage
	// index orders the ledger's keys by window, tenant, rule and region,
	// for exports in pages (see ledgerPage). It holds exactly the keys of
	// ledger: addUsage, maintain and restoring a snapshot keep it so.
	index *btree.BTreeG[LedgerKey]
	// open maps each billing window not yet final to the incarnations that
	// reported usage in it.
	open map[int64]map[incKey]struct{}
	// final holds the windows that are final: they never change again.
	final map[int64]bool
	// grantEpoch and grantSeq number the last GrantsCommand applied.
	grantEpoch, grantSeq uint64
	// clusterID names the cluster: fixed with the settings by its first
	// leader, "" until then, and kept in every member's identity file.
	clusterID string
}

// incKey identifies one run of one agent.
type incKey struct {
	node        string
	incarnation uint64
}

func (k incKey) String() string { return fmt.Sprintf("%s/%d", k.node, k.incarnation) }

type incarnation struct {
	lastSeq     uint64
	lastApplied int64 // leader clock of the last report applied, ns
	lastCut     int64 // newest batch cut time, ns
}

// RecentNodes counts the nodes (by name, whatever their incarnations)
// whose usage was applied at or after since, on the proposing leader's
// clock: the fleet as the replicated state knows it, which a new leader
// starts from.
func (s *State) RecentNodes(since int64) int {
	seen := map[string]struct{}{}
	for k, inc := range s.incarnations {
		if inc.lastApplied >= since {
			seen[k.node] = struct{}{}
		}
	}
	return len(seen)
}

// HasNode reports whether any incarnation of node has usage in the state.
func (s *State) HasNode(node string) bool {
	for k := range s.incarnations {
		if k.node == node {
			return true
		}
	}
	return false
}

// LedgerKey is one line of the bill: a tenant's usage under one rule, in
// one region, in one billing window (its start, in Unix seconds).
type LedgerKey struct {
	Tenant, Rule, Region string
	Window               int64
}

type usage struct {
	admitted, denied uint64
	// granted is what the parent leased the region over the window
	// (GrantsCommand); nil when none was recorded.
	granted *float64
}

func New() *State {
	rs, _ := rules.NewSet(0, nil)
	return &State{
		rules:        rs,
		members:      map[string]*allotpb.Member{},
		incarnations: map[incKey]*incarnation{},
		ledger:       map[LedgerKey]*usage{},
		index:        newLedgerIndex(),
		open:         map[int64]map[incKey]struct{}{},
		final:        map[int64]bool{},
	}
}

// windowOf aligns a Unix second down to the start of its billing window.
func (s *State) windowOf(unix int64) int64 {
	w := s.BillingWindowSeconds()
	q := unix / w
	if unix%w != 0 && unix < 0 {
		q--
	}
	return q * w
}

// BillingWindowSeconds is the billing window in whole seconds.
func (s *State) BillingWindowSeconds() int64 {
	if s.billingWindow < int64(time.Second) {
		return int64(DefaultBillingWindow / time.Second)
	}
	return s.billingWindow / int64(time.Second)
}

// applyReports adds each report's usage batch to the ledger, exactly once
// per (node, incarnation, seq), and returns the highest batch applied for
// each report's incarnation.
func (s *State) applyReports(cmd *fsmpb.ReportsCommand) *fsmpb.ReportsResult {
	now := cmd.GetProposedUnixNano()
	res := &fsmpb.ReportsResult{AckedSeq: make([]uint64, len(cmd.GetReports()))}
	for i, r := range cmd.GetReports() {
		k := incKey{r.GetNode(), r.GetIncarnation()}
		inc := s.incarnations[k]
		if inc == nil {
			inc = &incarnation{}
			s.incarnations[k] = inc
		}
		inc.lastApplied = now
		if b := r.GetBatch(); b != nil && b.GetSeq() > inc.lastSeq {
			for _, c := range b.GetCounts() {
				s.addUsage(k, r.GetRegion(), c, now)
			}
			inc.lastSeq = b.GetSeq()
			inc.lastCut = max(inc.lastCut, b.GetCutUnixNano())
		}
		res.AckedSeq[i] = inc.lastSeq
	}
	return res
}

// addUsage adds one count to the ledger. A count for a window that is
// already final (an agent cut off for longer than the agent timeout) is
// carried into the window open at now, so that final windows never change
// and no usage is lost.
func (s *State) addUsage(k incKey, region string, c *allotpb.UsageCount, now int64) {
	window := s.windowOf(c.GetWindowUnix())
	if s.final[window] {
		window = s.windowOf(now / int64(time.Second))
	}
	key := LedgerKey{Tenant: c.GetTenant(), Rule: c.GetRule(), Region: region, Window: window}
	u := s.ledger[key]
	if u == nil {
		u = &usage{}
		s.putLedger(key, u)
	}
	// Totals stop at the largest count rather than wrap to a small one.
	u.admitted = allotpb.SaturatingAdd(u.admitted, c.GetAdmitted())
	u.denied = allotpb.SaturatingAdd(u.denied, c.GetDenied())
	reporters := s.open[window]
	if reporters == nil {
		reporters = map[incKey]struct{}{}
		s.open[window] = reporters
	}
	reporters[k] = struct{}{}
}

// applyRules puts and deletes rules, all or none. An invalid result leaves
// the rules unchanged and returns the error; the proposer validated the
// command before proposing it, so this only guards against divergence.
func (s *State) applyRules(cmd *fsmpb.RulesCommand) error {
	set, err := nextRules(s.rules, cmd)
	if err != nil {
		return err
	}
	s.rules = set
	return nil
}

// CheckRules returns the error applying cmd would refuse it with, without
// applying it: proposers validate a rules command before proposing it.
func (s *State) CheckRules(cmd *fsmpb.RulesCommand) error {
	_, err := nextRules(s.rules, cmd)
	return err
}

// nextRules is the rule set cmd makes of cur.
func nextRules(cur *rules.Set, cmd *fsmpb.RulesCommand) (*rules.Set, error) {
	byName := map[string]rules.Rule{}
	if !cmd.GetReplaceAll() {
		for _, r := range cur.Rules() {
			byName[r.Name] = r
		}
	}
	for _, name := range cmd.GetDelete() {
		delete(byName, name)
	}
	for _, p := range cmd.GetPut() {
		r, err := rulespb.FromProto(p)
		if err != nil {
			return nil, err
		}
		byName[r.Name] = r
	}
	list := make([]rules.Rule, 0, len(byName))
	for _, r := range byName {
		list = append(list, r)
	}
	return rules.NewSet(cur.Version()+1, list)
}

func (s *State) applyMember(cmd *fsmpb.MemberCommand) {
	m := cmd.GetMember()
	if cmd.GetRemove() {
		delete(s.members, m.GetId())
		return
	}
	s.members[m.GetId()] = &allotpb.Member{Id: m.GetId(), RaftAddress: m.GetRaftAddress(), GrpcAddress: m.GetGrpcAddress(), HttpAddress: m.GetHttpAddress()}
}

func (s *State) applyEpoch(cmd *fsmpb.EpochCommand) uint64 {
	s.epoch = max(s.epoch+1, cmd.GetAtLeast())
	return s.epoch
}

// applySettings fixes each cluster setting that is not fixed yet; one
// already fixed never changes. A cluster from before report interval and
// lease TTL were replicated has its billing window only: its next leader
// fixes the other two.
func (s *State) applySettings(cmd *fsmpb.SettingsCommand) {
	if s.billingWindow == 0 && cmd.GetBillingWindowNano() >= int64(time.Second) {
		s.billingWindow = cmd.GetBillingWindowNano() - cmd.GetBillingWindowNano()%int64(time.Second)
	}
	if s.reportInterval == 0 && cmd.GetReportIntervalNano() > 0 {
		s.reportInterval = cmd.GetReportIntervalNano()
	}
	if s.leaseTTL == 0 && cmd.GetLeaseTtlNano() > 0 {
		s.leaseTTL = cmd.GetLeaseTtlNano()
	}
	if s.clusterID == "" {
		s.clusterID = cmd.GetClusterId()
	}
}

// Settled reports whether every cluster setting is fixed.
func (s *State) Settled() bool {
	return s.billingWindow != 0 && s.reportInterval != 0 && s.leaseTTL != 0 && s.clusterID != ""
}

// maintain finalizes billing windows that have closed and whose reporters
// have all been acknowledged past their end (or are gone), forgets
// incarnations silent for long, and drops ledger windows past retention.
func (s *State) maintain(cmd *fsmpb.MaintainCommand) {
	now, timeout := cmd.GetNowUnixNano(), cmd.GetAgentTimeoutNano()
	width := s.BillingWindowSeconds() * int64(time.Second)
	for window, reporters := range s.open {
		end := windowEnd(window, width)
		if end > now {
			continue
		}
		done := true
		for k := range reporters {
			inc := s.incarnations[k]
			if inc != nil && inc.lastCut < end && now-inc.lastApplied < timeout {
				done = false
				break
			}
		}
		if done {
			s.final[window] = true
			delete(s.open, window)
		}
	}
	// An incarnation's record is what makes a retried batch count once;
	// keep it far longer than any agent keeps a batch unacknowledged.
	forget := max(24*time.Hour.Nanoseconds(), 10*timeout)
	for k, inc := range s.incarnations {
		if now-inc.lastApplied > forget {
			delete(s.incarnations, k)
		}
	}
	if r := cmd.GetRetentionNano(); r > 0 {
		cutoff := now - r
		s.dropLedgerBefore(cutoff, width)
		for window := range s.final {
			if windowEnd(window, width) < cutoff {
				delete(s.final, window)
			}
		}
	}
}

// applyGrants adds what a region's leader counted of its leases from the
// parent to the ledger, once: a command whose epoch and seq are not past
// the last applied is a repeat and changes nothing. A grant creates its
// ledger line if no usage did (a tenant leased and idle).
func (s *State) applyGrants(cmd *fsmpb.GrantsCommand) {
	if cmd.GetEpoch() < s.grantEpoch || cmd.GetEpoch() == s.grantEpoch && cmd.GetSeq() <= s.grantSeq {
		return
	}
	s.grantEpoch, s.grantSeq = cmd.GetEpoch(), cmd.GetSeq()
	for _, g := range cmd.GetGrants() {
		if !(g.GetGranted() > 0) || math.IsInf(g.GetGranted(), 0) {
			continue
		}
		k := LedgerKey{g.GetTenant(), g.GetRule(), cmd.GetRegion(), g.GetWindowUnix()}
		u := s.ledger[k]
		if u == nil {
			u = &usage{}
			s.putLedger(k, u)
		}
		sum := g.GetGranted()
		if u.granted != nil {
			sum += *u.granted
		}
		u.granted = &sum
		// A window only grants reached is open until it ends, as any
		// other, so that it becomes final (and expires) in its turn.
		if w := g.GetWindowUnix(); !s.final[w] && s.open[w] == nil {
			s.open[w] = map[incKey]struct{}{}
		}
	}
}
