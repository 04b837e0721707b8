package state

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"github.com/google/btree"
	"google.golang.org/protobuf/proto"
)

// Threshold notices (docs/billing.md, "Threshold notices"). The state
// keeps, for each tenant of a rule with notices, a tally of its admitted
// usage over the rule's current cycle, added to as each report's usage
// is applied. When a tally reaches one of the rule's thresholds of the
// limit in force, the same application records a notice. Crossings are
// so detected on every member from the log alone, deterministically: a
// failover can neither lose one (the reports that crossed it are
// committed, or not applied at all) nor record one twice (the tally
// remembers the highest threshold recorded). The ledger could not serve:
// with a sink, its exported lines leave the state mid-cycle.
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

// cycleOf is tenant's cycle of rule r containing at (rules.Rule.CycleAt):
// for a calendar rule, its month from its override's anchor or the
// rule's (the coordinators do not know tenants' plans), else the period's
// window from the Unix epoch.
func (s *State) cycleOf(r *rules.Rule, tenant string, at time.Time) (start, end time.Time) {
	var o rules.TenantOverride
	p, ok := s.Override(r.Name, tenant)
	if ok {
		o = rulespb.OverrideFromProto(p).TenantOverride
	}
	return s.cycleIn(r, o, ok, tenant, at)
}

// tallyKey names one tenant's cycle under a rule.
type tallyKey struct {
	rule, tenant string
	start        int64 // Unix s
}

type tallyItem struct {
	key tallyKey
	end int64 // Unix s
	// used is the admitted usage; noticed the highest threshold recorded
	// (0: none).
	used    uint64
	noticed float64
}

func compareTallyKeys(a, b tallyKey) int {
	return cmp.Or(strings.Compare(a.rule, b.rule), strings.Compare(a.tenant, b.tenant), cmp.Compare(a.start, b.start))
}

// noticeStore holds the tallies and the notices, by key. rules are the
// rules with notices, by name: rebuilt when the rules change, so that
// usage of any other rule costs one map lookup.
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

// indexNoticeRules notes the rules with notices, after the rules change.
func (s *State) indexNoticeRules() {
	s.notices.rules = nil
	for _, r := range s.rules.Rules() {
		if len(r.Notices) > 0 {
			if s.notices.rules == nil {
				s.notices.rules = map[string]*rules.Rule{}
			}
			s.notices.rules[r.Name] = &r
		}
	}
}

// countNotice adds admitted usage of tenant under rule, in the ledger's
// billing window window (Unix s), to the tenant's tally for the cycle
// holding the window, and records a notice for each threshold the tally
// reaches first. now is the proposing leader's clock (Unix ns).
func (s *State) countNotice(rule, tenant string, window int64, admitted uint64, now int64) {
	r := s.notices.rules[rule]
	if r == nil || admitted == 0 || tenant == "" {
		return
	}
	start, end := s.cycleOf(r, tenant, time.Unix(window, 0))
	if end.UnixNano() < now-noticeHorizon(r.Period) {
		return
	}
	k := tallyKey{rule: rule, tenant: tenant, start: start.Unix()}
	it, _ := s.notices.tallies.Get(tallyItem{key: k})
	it.key, it.end = k, end.Unix()
	it.used = allotpb.SaturatingAdd(it.used, admitted)
	limit := s.noticeLimit(r, tenant)
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
}

// noticeLimit is the limit in force for tenant under r, as the state knows
// it: an override's, else the rule's tenant override's, else the rule's.
// A plan's limit is not: the coordinators do not know tenants' plans.
func (s *State) noticeLimit(r *rules.Rule, tenant string) int64 {
	if o, ok := s.Override(r.Name, tenant); ok && o.GetLimit() > 0 {
		return o.GetLimit()
	}
	return r.LimitFor(tenant, "")
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
			Used: it.used, Noticed: it.noticed,
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
		end: m.GetCycleEndUnix(), used: m.GetUsed(), noticed: m.GetNoticed(),
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

// checkNoticeCycles refuses a rule with notices whose period is not a
// whole number of the cluster's billing windows, or, on the calendar,
// whose days are not: usage is counted by billing window, so a cycle must
// be made of whole ones.
func (s *State) checkNoticeCycles(set *rules.Set) error {
	w := time.Duration(s.BillingWindowSeconds()) * time.Second
	var errs rules.Errors
	for _, r := range set.Rules() {
		if len(r.Notices) > 0 && r.Cycle != nil && (24*time.Hour)%w != 0 {
			errs = append(errs, &rules.Error{Rule: r.Name, Field: "notices", Msg: fmt.Sprintf(
				"a rule with notices measures usage by the cluster's billing windows (%v), so a calendar period's days must be a whole number of them", w)})
		} else if len(r.Notices) > 0 && r.Cycle == nil && (r.Period < w || r.Period%w != 0) {
			errs = append(errs, &rules.Error{Rule: r.Name, Field: "notices", Msg: fmt.Sprintf(
				"a rule with notices measures usage by the cluster's billing windows (%v), so its period (%v) must be a whole number of them", w, r.Period)})
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
