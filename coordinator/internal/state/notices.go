package state

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"github.com/google/btree"
	"google.golang.org/protobuf/proto"
)

// Threshold notices (docs/billing.md, "Threshold notices") and metered
// overage ("Metered overage"). The state keeps, for each tenant of a
// rule with notices or overage, a tally of its admitted usage over the
// rule's current cycle, added to as each report's usage is applied.
// When a tally reaches one of the rule's thresholds of the limit in
// force, the same application records a notice; under a rule with
// overage, the part of each increment that takes the tally past the
// limit in force is the ledger line's overage. Both are so decided on
// every member from the log alone, deterministically, in log order: a
// failover can neither lose a notice (the reports that crossed it are
// committed, or not applied at all) nor record one twice (the tally
// remembers the highest threshold recorded), and the overage a cycle's
// lines hold is what its tally passed the limit by. The ledger could not
// serve: with a sink, its exported lines leave the state mid-cycle.
//
// Delivery is the leader's (coordinator/notices.go): it posts the pending
// notices to the webhook and stores them in the ledger sink, and marks
// them delivered, or stored, with CmdNoticesDelivered.

// noticeHorizon is how long after its cycle ends a tally is kept: usage
// arriving that late for the cycle starts no tally (it could cross a
// threshold on its own, for a cycle long over). The tallies, not the
// notices, are what keep a threshold from being recorded twice.
func noticeHorizon(cycle time.Duration) int64 { return max(cycle, 24*time.Hour).Nanoseconds() }

// KeepNotices is how long a notice is kept after it was crossed,
// delivered or not: for `allot notices list`, and for a receiver or sink
// away that long. A cluster without a webhook records notices all the
// same, and they must not pile up for ever.
const KeepNotices = 30 * 24 * time.Hour

// tallyKey names one tenant's cycle under a rule.
type tallyKey struct {
	rule, tenant string
	start        int64 // Unix s
}

type tallyItem struct {
	key tallyKey
	end int64 // Unix s
	// used is the admitted usage; noticed the highest threshold recorded
	// (0: none); overage the part of used counted as overage (a rule with
	// overage).
	used    uint64
	noticed float64
	overage uint64
}

func compareTallyKeys(a, b tallyKey) int {
	return cmp.Or(strings.Compare(a.rule, b.rule), strings.Compare(a.tenant, b.tenant), cmp.Compare(a.start, b.start))
}

// noticeStore holds the tallies and the notices, by key. rules are the
// rules with notices or overage, whose tenants' usage is tallied, by
// name: rebuilt when the rules change, so that usage of any other rule
// costs one map lookup.
type noticeStore struct {
	tallies *btree.BTreeG[tallyItem]
	notices *btree.BTreeG[*allotpb.Notice] // replaced on change, never changed
	rules   map[string]*rules.Rule
	// pending counts the notices not delivered to the webhook, unstored
	// those not stored in the sink.
	pending, unstored int
}

func newNoticeStore() noticeStore {
	return noticeStore{
		tallies: btree.NewG(degree, func(a, b tallyItem) bool { return compareTallyKeys(a.key, b.key) < 0 }),
		notices: btree.NewG(degree, func(a, b *allotpb.Notice) bool { return a.GetKey() < b.GetKey() }),
	}
}

func (n *noticeStore) clone() noticeStore {
	c := *n
	c.tallies, c.notices = n.tallies.Clone(), n.notices.Clone()
	return c
}

// NoticeKey is a notice's idempotency key: tenant, rule, cycle start (Unix
// s) and threshold, which name one notice for ever.
func NoticeKey(tenant, rule string, cycleStart int64, threshold float64) string {
	return tenant + "/" + rule + "/" + strconv.FormatInt(cycleStart, 10) + "/" + strconv.FormatFloat(threshold, 'g', -1, 64)
}

// indexNoticeRules notes the rules with notices or overage, after the
// rules change.
func (s *State) indexNoticeRules() {
	s.notices.rules = nil
	for _, r := range s.rules.Rules() {
		if len(r.Notices) > 0 || r.Overage != nil {
			if s.notices.rules == nil {
				s.notices.rules = map[string]*rules.Rule{}
			}
			s.notices.rules[r.Name] = &r
		}
	}
}

// tally adds admitted usage of tenant under rule, in the ledger's
// billing window window (Unix s), to the tenant's tally for the cycle
// holding the window, records a notice for each threshold the tally
// reaches first, and returns the part of admitted that is overage: under
// a rule with overage, what the tally passed the limit in force by with
// this usage, max(0, after − limit) − max(0, before − limit), so that a
// cycle's overage is what its usage passed the limit by, each unit
// counted against the limit in force when it was applied. now is the
// proposing leader's clock (Unix ns).
//
// Usage of a cycle over for longer than its horizon starts no tally (it
// would cross thresholds, and pass the limit, on its own) and is counted
// as no overage.
func (s *State) tally(rule, tenant string, window int64, admitted uint64, now int64) (overage uint64) {
	r := s.notices.rules[rule]
	if r == nil || admitted == 0 || tenant == "" {
		return 0
	}
	o, ok := s.overrideAt(rule, tenant, now)
	start, end := s.cycleIn(r, o, ok, tenant, time.Unix(window, 0))
	if end.UnixNano() < now-noticeHorizon(r.Period) {
		return 0
	}
	k := tallyKey{rule: rule, tenant: tenant, start: start.Unix()}
	it, _ := s.notices.tallies.Get(tallyItem{key: k})
	it.key, it.end = k, end.Unix()
	before := it.used
	it.used = allotpb.SaturatingAdd(it.used, admitted)
	limit := noticeLimit(r, o, ok, tenant)
	if r.Overage != nil {
		overage = rules.Excess(it.used, limit) - rules.Excess(before, limit)
		it.overage = allotpb.SaturatingAdd(it.overage, overage)
	}
	for _, th := range r.Notices {
		if th <= it.noticed || float64(it.used) < th*float64(limit) {
			continue
		}
		it.noticed = th
		n := &allotpb.Notice{
			Key: NoticeKey(tenant, rule, k.start, th), Tenant: tenant, Rule: rule,
			CycleStartUnix: k.start, CycleEndUnix: it.end, Threshold: th, Limit: limit, Used: it.used,
			CrossedUnixNano: now,
		}
		if _, had := s.notices.notices.ReplaceOrInsert(n); !had {
			s.notices.pending++
			s.notices.unstored++
		}
	}
	s.notices.tallies.ReplaceOrInsert(it)
	return overage
}

// noticeLimit is the limit in force for tenant under r with its override
// o when ok, as the state knows it: the override's, else the rule file's
// tenants entry's, else the rule's. A plan's limit is not: the
// coordinators do not know tenants' plans (a rule with overage has no
// plan limits, rules.Overage).
func noticeLimit(r *rules.Rule, o rules.TenantOverride, ok bool, tenant string) int64 {
	return r.LimitWith(o, ok, tenant, "")
}

// CycleOverage is the overage of tenant's cycle of rule starting at start
// (Unix s): what its usage passed the limit by, as its ledger lines
// count it; 0 for a rule without overage, or a cycle the state holds no
// tally of.
func (s *State) CycleOverage(rule, tenant string, start int64) uint64 {
	it, _ := s.notices.tallies.Get(tallyItem{key: tallyKey{rule: rule, tenant: tenant, start: start}})
	return it.overage
}

// applyNoticesDelivered marks notices delivered to the webhook or, with
// sink set, stored in the sink.
func (s *State) applyNoticesDelivered(cmd *fsmpb.NoticesDeliveredCommand) {
	at := max(cmd.GetNowUnixNano(), 1)
	for _, key := range cmd.GetKeys() {
		n, ok := s.notices.notices.Get(&allotpb.Notice{Key: key})
		if !ok || cmd.GetSink() && n.GetStoredUnixNano() != 0 || !cmd.GetSink() && n.GetDeliveredUnixNano() != 0 {
			continue
		}
		d := proto.CloneOf(n)
		if cmd.GetSink() {
			d.StoredUnixNano = at
			s.notices.unstored--
		} else {
			d.DeliveredUnixNano = at
			s.notices.pending--
		}
		s.notices.notices.ReplaceOrInsert(d)
	}
}

// pruneNotices drops, as of now (Unix ns), the tallies past their horizon
// and the notices older than KeepNotices.
func (s *State) pruneNotices(now int64) {
	horizon := func(rule string) int64 {
		if r := s.notices.rules[rule]; r != nil {
			return noticeHorizon(r.Period)
		}
		return noticeHorizon(0) // the rule lost its notices: keep a day
	}
	var tallies []tallyItem
	s.notices.tallies.Ascend(func(it tallyItem) bool {
		if it.end*int64(time.Second) < now-horizon(it.key.rule) {
			tallies = append(tallies, it)
		}
		return true
	})
	for _, it := range tallies {
		s.notices.tallies.Delete(it)
	}
	var drop []*allotpb.Notice
	s.notices.notices.Ascend(func(n *allotpb.Notice) bool {
		if n.GetCrossedUnixNano() < now-KeepNotices.Nanoseconds() {
			drop = append(drop, n)
		}
		return true
	})
	for _, n := range drop {
		s.notices.notices.Delete(n)
		s.uncount(n)
	}
}

// uncount takes a notice that leaves the store out of the counts.
func (s *State) uncount(n *allotpb.Notice) {
	if n.GetDeliveredUnixNano() == 0 {
		s.notices.pending--
	}
	if n.GetStoredUnixNano() == 0 {
		s.notices.unstored--
	}
}

// PendingNotices is how many notices wait for the webhook;
// UnstoredNotices how many wait for the ledger sink.
func (s *State) PendingNotices() int  { return s.notices.pending }
func (s *State) UnstoredNotices() int { return s.notices.unstored }

// EachNotice calls fn with each notice, by key, pending ones only when
// pendingOnly, until fn returns false. fn must not change it.
func (s *State) EachNotice(pendingOnly bool, fn func(*allotpb.Notice) bool) {
	s.notices.notices.Ascend(func(n *allotpb.Notice) bool {
		if pendingOnly && n.GetDeliveredUnixNano() != 0 {
			return true
		}
		return fn(n)
	})
}

// eachTally calls fn with each tally, by rule, tenant and cycle.
func (s *State) eachTally(fn func(*fsmpb.TallyRecord)) {
	s.notices.tallies.Ascend(func(it tallyItem) bool {
		fn(&fsmpb.TallyRecord{
			Rule: it.key.rule, Tenant: it.key.tenant, CycleStartUnix: it.key.start, CycleEndUnix: it.end,
			Used: it.used, Noticed: it.noticed, Overage: it.overage,
		})
		return true
	})
}

// restoreTally and restoreNotice add a snapshot's records.
func (s *State) restoreTally(m *fsmpb.TallyRecord) error {
	if m.GetRule() == "" || m.GetTenant() == "" || m.GetCycleEndUnix() <= m.GetCycleStartUnix() {
		return fmt.Errorf("notice tally %q/%q: not a tally (cycle %d–%d)", m.GetRule(), m.GetTenant(), m.GetCycleStartUnix(), m.GetCycleEndUnix())
	}
	s.notices.tallies.ReplaceOrInsert(tallyItem{
		key: tallyKey{rule: m.GetRule(), tenant: m.GetTenant(), start: m.GetCycleStartUnix()},
		end: m.GetCycleEndUnix(), used: m.GetUsed(), noticed: m.GetNoticed(), overage: m.GetOverage(),
	})
	return nil
}

func (s *State) restoreNotice(n *allotpb.Notice) error {
	if n.GetKey() != NoticeKey(n.GetTenant(), n.GetRule(), n.GetCycleStartUnix(), n.GetThreshold()) {
		return fmt.Errorf("notice %q: its key is not its tenant, rule, cycle and threshold", n.GetKey())
	}
	if old, had := s.notices.notices.ReplaceOrInsert(n); had {
		s.uncount(old)
	}
	if n.GetDeliveredUnixNano() == 0 {
		s.notices.pending++
	}
	if n.GetStoredUnixNano() == 0 {
		s.notices.unstored++
	}
	return nil
}

// checkNoticeCycles refuses a rule with notices or overage whose period
// is not a whole number of the cluster's billing windows, or, on the
// calendar, whose days are not: usage is counted by billing window, so a
// cycle must be made of whole ones.
func (s *State) checkNoticeCycles(set *rules.Set) error {
	w := time.Duration(s.BillingWindowSeconds()) * time.Second
	var errs rules.Errors
	for _, r := range set.Rules() {
		field, what := "notices", "notices"
		switch {
		case r.Overage != nil:
			field, what = "overage", "overage"
		case len(r.Notices) == 0:
			continue
		}
		if r.Cycle != nil && (24*time.Hour)%w != 0 {
			errs = append(errs, &rules.Error{Rule: r.Name, Field: field, Msg: fmt.Sprintf(
				"a rule with %s measures usage by the cluster's billing windows (%v), so a calendar period's days must be a whole number of them", what, w)})
		} else if r.Cycle == nil && (r.Period < w || r.Period%w != 0) {
			errs = append(errs, &rules.Error{Rule: r.Name, Field: field, Msg: fmt.Sprintf(
				"a rule with %s measures usage by the cluster's billing windows (%v), so its period (%v) must be a whole number of them", what, w, r.Period)})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// NoticesAfter calls fn with each notice whose key is after after (all
// of them for ""), by key, until fn returns false.
func (s *State) NoticesAfter(after string, fn func(*allotpb.Notice) bool) {
	s.notices.notices.AscendGreaterOrEqual(&allotpb.Notice{Key: after}, func(n *allotpb.Notice) bool {
		if after != "" && n.GetKey() == after {
			return true
		}
		return fn(n)
	})
}
