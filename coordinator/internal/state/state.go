package state

import (
	"math"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/internal/shard"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
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
	// The collections are copy-on-write B-trees of values (store.go), so
	// that a snapshot clones them in O(1) under the FSM's lock and walks
	// its clone without it while Apply goes on changing the state.
	//
	// members are the member records by ID; a record is replaced on
	// change, never changed.
	members *btree.BTreeG[*allotpb.Member]
	// incarnations are the agent runs by node and incarnation.
	incarnations *btree.BTreeG[runItem]
	// ledger is the bill, ordered by window, tenant, rule and region: the
	// order exports are paged in (see ledgerPage) and snapshots written in.
	ledger *btree.BTreeG[lineItem]
	// open holds each billing window not yet final (a marker item) and
	// the incarnations that reported usage in it.
	open *btree.BTreeG[openItem]
	// final holds the windows that are final: they never change again.
	final *btree.BTreeG[int64]
	// grantEpoch and grantSeq number the last GrantsCommand applied.
	grantEpoch, grantSeq uint64
	// clusterID names the cluster: fixed with the settings by its first
	// leader, "" until then, and kept in every member's identity file.
	clusterID string
	// export is how far a ledger sink has taken the ledger (export.go);
	// retentionDropped counts the lines retention deleted.
	export           ledger.Position
	retentionDropped uint64
	// finalLines counts the ledger's lines in final windows: with a sink,
	// the lines waiting for it. Kept as lines come and go, so that the
	// exporter's gauges cost nothing.
	finalLines int
	// slots is what this shard group owns (slots.go): nil for a cluster
	// never split, which owns every slot. shardMap is the region's map,
	// held by the home group only (shardmap.go); nil until a group is
	// added.
	slots    *slotTable
	shardMap *shard.Map
	// ov holds the per-tenant overrides (overrides.go).
	ov overrideStore
	// audit is the audit log (audit.go). recorded is the kind of entry the
	// command being applied recorded: not replicated, for the metric.
	audit    auditStore
	recorded string
	// resets are the newest key resets (resets.go).
	resets resetLog
	// notices are the threshold notices and the tallies behind them
	// (notices.go).
	notices noticeStore
	// terms index the rules whose ledger lines record terms (terms.go).
	terms termsIndex
}

// incKey identifies one run of one agent.
type incKey struct {
	node        string
	incarnation uint64
}

type incarnation struct {
	lastSeq     uint64
	lastApplied int64 // leader clock of the last report applied, ns
	lastCut     int64 // newest batch cut time, ns
	// left is set when the incarnation's last batch was applied (a clean
	// shutdown): it counts no more usage, and no window waits for it.
	left bool
}

// RecentNodes counts the nodes (by name, whatever their incarnations)
// whose usage was applied at or after since, on the proposing leader's
// clock: the fleet as the replicated state knows it, which a new leader
// starts from.
func (s *State) RecentNodes(since int64) int {
	seen := map[string]struct{}{}
	s.incarnations.Ascend(func(it runItem) bool {
		if it.inc.lastApplied >= since {
			seen[it.key.node] = struct{}{}
		}
		return true
	})
	return len(seen)
}

// HasNode reports whether any incarnation of node has usage in the state.
func (s *State) HasNode(node string) bool {
	found := false
	s.incarnations.AscendGreaterOrEqual(runItem{key: incKey{node: node}}, func(it runItem) bool {
		found = it.key.node == node
		return false
	})
	return found
}

type usage struct {
	admitted, denied uint64
	// granted is what the parent leased the region over the window
	// (GrantsCommand); nil when none was recorded. What it points to is
	// never changed: a new sum is a new value.
	granted *float64
	// terms are the cycle and limit the usage was counted against, as of
	// the last report that added to it (terms.go).
	terms ledger.Terms
	// overage is the part of admitted past the limit in force, under a
	// rule with overage (notices.go's tally).
	overage uint64
}

// New returns an empty state: no rules, members or usage, no settings
// fixed.
func New() *State {
	rs, _ := rules.NewSet(0, nil)
	return &State{
		rules:        rs,
		members:      newMembers(),
		incarnations: newRuns(),
		ledger:       newLedger(),
		open:         newOpen(),
		final:        newFinal(),
		ov:           newOverrideStore(),
		audit:        newAuditStore(),
		notices:      newNoticeStore(),
	}
}

// setRules replaces the rule set, and what the state indexes of it.
func (s *State) setRules(set *rules.Set) {
	s.rules = set
	s.indexNoticeRules()
	s.indexTermsRules()
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

// How long an incarnation's record is kept, and so which batches may
// repeat one applied before it was forgotten. maintain forgets an
// incarnation silent for MinForget at least (10 × the agent timeout when
// longer). Every batch it applied was cut before its last application
// plus an hour (the coordinators refuse a cut further ahead of their
// clock: coordinator.MaxClockAhead), so before the forgetting leader's
// clock less MinForget plus that hour. A batch of an incarnation the
// state does not know, cut more than StaleBatchAge before the proposing
// leader's clock (an hour more for the leaders' clocks to differ), may
// be such a repeat: it is refused (ReportsCommand.stale_before_unix_nano).
const (
	MinForget     = 24 * time.Hour
	StaleBatchAge = MinForget - 2*time.Hour
)

// StaleBefore is the stale_before_unix_nano of a ReportsCommand proposed
// at now (Unix ns).
func StaleBefore(now int64) int64 { return now - int64(StaleBatchAge) }

// applyReports adds each report's usage batch to the ledger, exactly once
// per (node, incarnation, seq), and returns the highest batch applied for
// each report's incarnation.
//
// A batch of an incarnation the state does not know, cut before the
// command's stale_before_unix_nano, may have been applied before the
// incarnation was forgotten (its acknowledgement lost, the agent cut off
// for a day): it is recorded as applied and none of its usage is counted,
// so that it is never counted twice; the incarnation's later batches are
// applied as any others. Its usage is lost if it had never been applied:
// the state cannot tell, and a bill must never count usage twice. A batch
// without a cut time (a client that sets none; Allot's agents always do)
// cannot be told from a new incarnation's and is applied.
func (s *State) applyReports(cmd *fsmpb.ReportsCommand) *fsmpb.ReportsResult {
	now, staleBefore := cmd.GetProposedUnixNano(), cmd.GetStaleBeforeUnixNano()
	res := &fsmpb.ReportsResult{AckedSeq: make([]uint64, len(cmd.GetReports()))}
	for i, r := range cmd.GetReports() {
		k := incKey{r.GetNode(), r.GetIncarnation()}
		it, known := s.incarnations.Get(runItem{key: k})
		it.key = k
		inc := &it.inc
		inc.lastApplied = now
		if b := r.GetBatch(); b != nil && b.GetSeq() > inc.lastSeq && !known && staleBefore != 0 && b.GetCutUnixNano() != 0 && b.GetCutUnixNano() < staleBefore {
			// Before the slots' check: whatever moved since, nothing of
			// a batch that may have been applied is applied again.
			inc.lastSeq, inc.lastCut = b.GetSeq(), max(inc.lastCut, b.GetCutUnixNano())
			inc.left = inc.left || b.GetLast()
			s.incarnations.ReplaceOrInsert(it)
			res.Stale = append(res.Stale, uint32(i))
			res.AckedSeq[i] = inc.lastSeq
			continue
		}
		if b := r.GetBatch(); b != nil && b.GetSeq() > inc.lastSeq {
			// A batch holding usage of a slot this group does not own is
			// not applied at all: the agent routes it again. A batch
			// already applied is acknowledged first, whatever moved since.
			if moved := s.unowned(b); moved != nil {
				res.Moved = append(res.Moved, &fsmpb.MovedReport{Report: uint32(i), Slots: moved})
				s.incarnations.ReplaceOrInsert(it)
				res.AckedSeq[i] = inc.lastSeq
				continue
			}
			for _, c := range b.GetCounts() {
				s.addUsage(k, r.GetRegion(), c, now)
			}
			inc.lastSeq = b.GetSeq()
			inc.lastCut = max(inc.lastCut, b.GetCutUnixNano())
			inc.left = inc.left || b.GetLast()
		}
		s.incarnations.ReplaceOrInsert(it)
		res.AckedSeq[i] = inc.lastSeq
	}
	return res
}

// addUsage adds one count to the ledger. A count for a window that is
// already final (an agent cut off for longer than the agent timeout) is
// carried into the window open at now, so that final windows never change
// and no usage is lost; the line's terms are then that window's.
func (s *State) addUsage(k incKey, region string, c *allotpb.UsageCount, now int64) {
	window := s.accepting(s.windowOf(c.GetWindowUnix()), now)
	key := ledger.Key{Window: window, Tenant: c.GetTenant(), Rule: c.GetRule(), Region: region}
	line, _ := s.ledger.Get(lineItem{key: key})
	line.key = key
	// Totals stop at the largest count rather than wrap to a small one.
	line.u.admitted = allotpb.SaturatingAdd(line.u.admitted, c.GetAdmitted())
	line.u.denied = allotpb.SaturatingAdd(line.u.denied, c.GetDenied())
	line.u.overage = allotpb.SaturatingAdd(line.u.overage, s.tally(c.GetRule(), c.GetTenant(), window, c.GetAdmitted(), now))
	// The terms in force now replace those of the line's earlier usage
	// while its window lasts, so that a limit changed within the window is
	// the one its end was counted against. Usage applied after the window
	// ended (reports lag by an interval) was counted before, under the
	// terms the line has: a change since is a later window's. A rule
	// deleted since has no terms, and leaves the line's.
	if line.u.terms == (ledger.Terms{}) || now < windowEnd(window, s.BillingWindowSeconds()*int64(time.Second)) {
		if t := s.termsOf(key.Rule, key.Tenant, window, now); t != (ledger.Terms{}) {
			line.u.terms = t
		}
	}
	s.ledger.ReplaceOrInsert(line)
	s.openWindow(window)
	insertIfAbsent(s.open, openItem{window: window, reporter: k})
}

// closed reports whether a window takes no more lines: it is final, or
// older than the export position (a window no one reported in while the
// windows around it were exported: a line there would sit below the
// position, never exported).
func (s *State) closed(window int64) bool {
	return s.final.Has(window) || s.export.Set && window < s.export.Last.Window
}

// accepting is the window a line for window goes into, as of now (Unix
// ns, the proposer's clock): window itself unless it is closed, else the
// window open at now or, when a leader's clock is behind what was closed
// already, the window after the newest closed one.
func (s *State) accepting(window, now int64) int64 {
	if !s.closed(window) {
		return window
	}
	w := s.windowOf(now / int64(time.Second))
	if s.closed(w) {
		last := s.export.Last.Window
		if m, ok := s.final.Max(); ok {
			last = max(last, m)
		}
		w = last + s.BillingWindowSeconds()
	}
	return w
}

// applyRules puts and deletes rules, all or none. An invalid result leaves
// the rules unchanged and returns the error; the proposer validated the
// command before proposing it, so this only guards against divergence.
func (s *State) applyRules(cmd *fsmpb.RulesCommand) error {
	set, err := nextRules(s.rules, cmd)
	if err == nil && cmd.GetVersion() == 0 {
		// A mirror of the home group's rules is taken as the home group
		// took them: refusing it would leave this group's rules behind
		// for good.
		err = s.checkNoticeCycles(set)
	}
	if err != nil {
		return err
	}
	if a := cmd.GetAudit(); a != nil {
		s.record(a, rulesChange(s.rules, set, cmd))
	}
	s.setRules(set)
	if cmd.GetVersion() == 0 { // not a mirror of the home group's rules
		s.dropRulelessOverrides(0)
	}
	return nil
}

// CheckRules returns the error applying cmd would refuse it with, without
// applying it: proposers validate a rules command before proposing it.
func (s *State) CheckRules(cmd *fsmpb.RulesCommand) error {
	set, err := nextRules(s.rules, cmd)
	if err != nil {
		return err
	}
	return s.checkNoticeCycles(set)
}

// RulesUnchanged reports whether applying cmd would leave the rules as
// they are: every rule it puts equal to the one of its name, none
// deleted. A valid command only; the leader answers such a put with the
// rules it holds instead of proposing it, so that the version moves only
// when the rules do.
func (s *State) RulesUnchanged(cmd *fsmpb.RulesCommand) bool {
	next, err := nextRules(s.rules, cmd)
	return err == nil && next.SameRules(s.rules)
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
	version := cur.Version() + 1
	if v := cmd.GetVersion(); v > 0 {
		version = v
	}
	return rules.NewSet(version, list)
}

func (s *State) applyMember(cmd *fsmpb.MemberCommand) {
	m := cmd.GetMember()
	was, _ := s.members.Get(&allotpb.Member{Id: m.GetId()})
	var is *allotpb.Member
	if cmd.GetRemove() {
		s.members.Delete(&allotpb.Member{Id: m.GetId()})
	} else {
		is = &allotpb.Member{Id: m.GetId(), RaftAddress: m.GetRaftAddress(), GrpcAddress: m.GetGrpcAddress(), HttpAddress: m.GetHttpAddress()}
		s.members.ReplaceOrInsert(is)
	}
	if a := cmd.GetAudit(); a != nil {
		ch := auditChange{kind: AuditMembership, subjects: []string{m.GetId()}, changed: 1, before: &allotpb.AuditValues{}, after: &allotpb.AuditValues{}}
		if was != nil {
			ch.before.Members = []*allotpb.Member{was}
		}
		if is != nil {
			ch.after.Members = []*allotpb.Member{is}
		}
		s.record(a, ch)
	}
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
	s.expireOverrides(now)
	s.pruneNotices(now)
	if r := cmd.GetAuditRetentionNano(); r > 0 {
		s.expireAudit(now-r, cmd.GetAuditMaxEntries())
	} else if cmd.GetAuditMaxEntries() > 0 {
		s.audit.keep(cmd.GetAuditMaxEntries())
	}
	width := s.BillingWindowSeconds() * int64(time.Second)
	// A window is done when it has ended and each of its reporters is
	// gone, has left (its last batch applied), is silent past the
	// timeout, or is acknowledged past its end.
	var finalize []int64
	done := func(window int64, reporters []incKey) bool {
		end := windowEnd(window, width)
		if end > now {
			return false
		}
		for _, k := range reporters {
			it, ok := s.incarnations.Get(runItem{key: k})
			if ok && !it.inc.left && it.inc.lastCut < end && now-it.inc.lastApplied < timeout {
				return false
			}
		}
		return true
	}
	s.eachOpen(func(window int64, reporters []incKey) {
		if done(window, reporters) {
			finalize = append(finalize, window)
		}
	})
	for _, w := range finalize {
		s.final.ReplaceOrInsert(w)
		s.closeWindow(w)
		s.finalLines += s.linesIn(w)
	}
	// An incarnation's record is what makes a retried batch count once;
	// keep it far longer than any agent keeps a batch unacknowledged. A
	// batch re-sent after it is forgotten is refused as stale (see
	// StaleBatchAge), never counted twice.
	forget := max(MinForget.Nanoseconds(), 10*timeout)
	var silent []runItem
	s.incarnations.Ascend(func(it runItem) bool {
		if now-it.inc.lastApplied > forget {
			silent = append(silent, it)
		}
		return true
	})
	for _, it := range silent {
		s.incarnations.Delete(it)
	}
	if r := cmd.GetRetentionNano(); r > 0 {
		cutoff := now - r
		s.retentionDropped += uint64(s.dropLedgerBefore(cutoff, width))
		var expired []int64
		s.final.Ascend(func(w int64) bool {
			if windowEnd(w, width) >= cutoff {
				return false // later windows end later
			}
			expired = append(expired, w)
			return true
		})
		for _, w := range expired {
			s.final.Delete(w)
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
		window := g.GetWindowUnix()
		if cmd.GetProposedUnixNano() != 0 {
			// As late usage is: a final window never changes.
			window = s.accepting(window, cmd.GetProposedUnixNano())
		}
		k := ledger.Key{Window: window, Tenant: g.GetTenant(), Rule: g.GetRule(), Region: cmd.GetRegion()}
		line, found := s.ledger.Get(lineItem{key: k})
		if !found && s.final.Has(window) {
			s.finalLines++ // a grant from before grants carried the proposer's clock
		}
		line.key = k
		sum := g.GetGranted()
		if line.u.granted != nil {
			sum += *line.u.granted
		}
		line.u.granted = &sum // a new value: a snapshot's clone may share the old one
		s.ledger.ReplaceOrInsert(line)
		// A window only grants reached is open until it ends, as any
		// other, so that it becomes final (and expires) in its turn.
		if !s.closed(window) {
			s.openWindow(window)
		}
	}
}
