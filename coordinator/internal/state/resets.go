package state

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// Resets start one key's counters afresh fleet-wide (a support case: a
// customer locked out by a bug of theirs). A reset changes no counted
// state here: the ledger keeps what was counted, since billing must not
// forget usage that happened. It is an event the nodes act on, so the
// state keeps a list of them, numbered by version, for agents and the
// region's other shard groups to follow by what was made since the
// version they hold, as they follow overrides.
//
// Only the newest MaxResets are kept: a reset is acted on within a report
// interval, and the list is for followers that fell behind and for
// operators to read, not a history (the audit log is). The floor is the
// version of the newest reset dropped: a follower below it has missed
// some, and is told so (ResetsDelta.full).

// MaxResets bounds the resets kept.
const MaxResets = 10_000

// maxResetValue bounds an attribute value or reason of a reset.
const maxResetValue = 4096

// ErrResetKeyNotFound is returned for a reset of a key the cluster has
// never seen: the caller's typo, which must not pass for a reset.
var ErrResetKeyNotFound = errors.New("no such key")

type resetLog struct {
	// list is the kept resets, oldest first. Appended to and cut from the
	// front only, never changed in place: a frozen copy of the state
	// shares it safely.
	list    []*allotpb.Reset
	version uint64
	floor   uint64
	mirror  bool // following the home group's resets (a shard group)
}

// ResetsVersion is the resets' version: 0 until one is made.
func (s *State) ResetsVersion() uint64 { return s.resets.version }

// ResetsCount is how many resets are kept.
func (s *State) ResetsCount() int { return len(s.resets.list) }

// ResetsSince returns the resets after version since, oldest first, at
// most limit of them, or nil when there are none. It is full when since
// is below the floor (some are gone), or ahead of this state (another
// cluster's version, or one restored from a backup: the caller takes this
// version and no resets); a mirror that since is ahead of has not yet
// taken in what the home group told the caller, and answers nil. With
// fresh set (an agent's first report: a process younger than every reset
// kept, or nearly) the answer is the version alone.
func (s *State) ResetsSince(since uint64, limit int, fresh bool) *allotpb.ResetsDelta {
	l := &s.resets
	switch {
	case since == l.version, since > l.version && l.mirror:
		return nil
	case since > l.version || fresh:
		return &allotpb.ResetsDelta{Version: l.version, Full: since > l.version}
	}
	d := &allotpb.ResetsDelta{Version: l.version, Full: since < l.floor}
	i, _ := slices.BinarySearchFunc(l.list, since+1, func(r *allotpb.Reset, v uint64) int {
		return cmp.Compare(r.GetVersion(), v)
	})
	rest := l.list[i:]
	if len(rest) > limit {
		rest = rest[:limit]
		d.More, d.Version = true, rest[len(rest)-1].GetVersion()
	}
	d.Resets = slices.Clone(rest)
	return d
}

// ListResets calls fn for each reset kept after version since, oldest
// first, restricted to rule and tenant when set, until fn returns false.
func (s *State) ListResets(since uint64, rule, tenant string, fn func(*allotpb.Reset) bool) {
	for _, r := range s.resets.list {
		if r.GetVersion() <= since || rule != "" && r.GetRule() != rule || tenant != "" && r.GetTenant() != tenant {
			continue
		}
		if !fn(r) {
			return
		}
	}
}

// CheckReset returns the reset as it would be recorded (attributes
// checked against the rule's key, the key filled in), or the errors that
// refuse it, each naming its field; it changes nothing. The caller checks
// that the key exists (HasUsage, and the leader's pools): the state holds
// no pools.
func (s *State) CheckReset(in *allotpb.Reset) (*allotpb.Reset, error) {
	var errs rules.Errors
	bad := func(field, format string, args ...any) {
		errs = append(errs, &rules.Error{Rule: in.GetRule(), Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	r, ok := s.rules.Get(in.GetRule())
	switch {
	case in.GetRule() == "":
		bad("rule", "is required")
		return nil, errs
	case !ok:
		bad("rule", "%q names no rule of the set (version %d)", in.GetRule(), s.rules.Version())
		return nil, errs
	case r.Scope == rules.Descriptor:
		// Its keys are Envoy descriptor entries, which the API has no
		// way to name.
		bad("rule", "%s is a descriptor rule: its keys cannot be named by tenant, user, route and ip", r.Name)
		return nil, errs
	}
	attrs := r.KeyAttrs()
	given := map[rules.Attr]string{
		rules.AttrTenant: in.GetTenant(), rules.AttrUser: in.GetUser(),
		rules.AttrRoute: in.GetRoute(), rules.AttrIP: in.GetIp(),
	}
	allKeys := in.GetAllKeys()
	if allKeys && !slices.Contains(attrs, rules.AttrTenant) {
		bad("all_keys", "the key of %s (%s) has no tenant whose keys to reset", r.Name, attrNames(attrs))
		allKeys = false
	}
	if allKeys && len(attrs) == 1 {
		allKeys = false // the tenant's one key
	}
	for _, a := range []rules.Attr{rules.AttrTenant, rules.AttrUser, rules.AttrRoute, rules.AttrIP} {
		v, inKey := given[a], slices.Contains(attrs, a)
		switch {
		case len(v) > maxResetValue:
			bad(string(a), "at most %d bytes, got %d", maxResetValue, len(v))
		case allKeys && a != rules.AttrTenant && v != "":
			bad(string(a), "all_keys resets every key of the tenant: give the tenant alone")
		case allKeys && a != rules.AttrTenant:
		case inKey && v == "":
			bad(string(a), "is required: the key of %s is %s", r.Name, attrNames(attrs))
		case !inKey && v != "":
			if r.Scope == rules.Global {
				bad(string(a), "%s is a global rule, whose one key is the rule itself: give the rule alone", r.Name)
			} else {
				bad(string(a), "is not part of the key of %s (%s)", r.Name, attrNames(attrs))
			}
		}
	}
	if len(in.GetReason()) > maxResetValue {
		bad("reason", "at most %d bytes, got %d", maxResetValue, len(in.GetReason()))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	out := &allotpb.Reset{Rule: r.Name, AllKeys: allKeys, Reason: in.GetReason(), By: in.GetBy()}
	vals := make([]string, 0, len(attrs))
	for _, a := range attrs {
		v := given[a]
		switch a {
		case rules.AttrTenant:
			out.Tenant = v
		case rules.AttrUser:
			out.User = v
		case rules.AttrRoute:
			out.Route = v
		case rules.AttrIP:
			out.Ip = v
		}
		vals = append(vals, v)
	}
	if !allKeys && len(vals) > 0 {
		out.Key = string(rules.AppendKey(nil, vals...))
	}
	return out, nil
}

func attrNames(attrs []rules.Attr) string {
	if len(attrs) == 0 {
		return "none"
	}
	s := ""
	for i, a := range attrs {
		if i > 0 {
			s += ", "
		}
		s += string(a)
	}
	return s
}

// HasUsage reports whether the ledger holds usage of tenant under rule in
// any window it keeps. The ledger is ordered by window, then tenant and
// rule, so this is a seek per window kept: O(windows · log lines).
func (s *State) HasUsage(tenant, rule string) bool {
	tenant = allotpb.BoundName(tenant) // as agents report it
	w := int64(math.MinInt64)
	for {
		var first lineItem
		ok := false
		s.ledger.AscendGreaterOrEqual(lineItem{key: ledger.Key{Window: w}}, func(it lineItem) bool {
			first, ok = it, true
			return false
		})
		if !ok {
			return false
		}
		w = first.key.Window
		found := false
		s.ledger.AscendGreaterOrEqual(lineItem{key: ledger.Key{Window: w, Tenant: tenant, Rule: rule}}, func(it lineItem) bool {
			found = it.key.Window == w && it.key.Tenant == tenant && it.key.Rule == rule
			return false
		})
		if found {
			return true
		}
		if w == math.MaxInt64 {
			return false
		}
		w++
	}
}

// applyReset records a reset, or a mirrored page of them, and returns
// the reset as recorded (a mirror: the version) or the error that
// refused it.
func (s *State) applyReset(cmd *fsmpb.ResetCommand) any {
	if cmd.GetMirror() {
		s.mirrorResets(cmd)
		return s.resets.version
	}
	r, err := s.CheckReset(cmd.GetEntry())
	if err != nil {
		return err
	}
	r.Version, r.AtUnixNano = s.resets.version+1, cmd.GetNowUnixNano()
	s.addReset(r)
	return r
}

// addReset appends a reset at its version, dropping the oldest beyond
// MaxResets.
func (s *State) addReset(r *allotpb.Reset) {
	l := &s.resets
	l.list = append(l.list, r)
	l.version = max(l.version, r.GetVersion())
	if n := len(l.list) - MaxResets; n > 0 {
		l.floor = max(l.floor, l.list[n-1].GetVersion())
		l.list = l.list[n:]
	}
}

// mirrorResets takes a page of the home group's resets with their
// versions, so that an agent following several groups holds one version.
// A page that is full (this group had fallen below the home group's
// floor) raises the floor: this group's own followers have missed what
// it did.
func (s *State) mirrorResets(cmd *fsmpb.ResetCommand) {
	s.resets.mirror = true
	for _, r := range cmd.GetMirrored() {
		if r.GetVersion() <= s.resets.version {
			continue
		}
		if s.resets.version+1 < r.GetVersion() {
			s.resets.floor = max(s.resets.floor, r.GetVersion()-1)
		}
		s.addReset(r)
	}
	s.resets.version = max(s.resets.version, cmd.GetMirrorVersion())
}

// MirroredResetsVersion is the home group's resets version this group
// has taken in.
func (s *State) MirroredResetsVersion() uint64 { return s.resets.version }

// eachReset calls fn for every reset kept, oldest first: the snapshot's
// order.
func (s *State) eachReset(fn func(*allotpb.Reset)) {
	for _, r := range s.resets.list {
		fn(r)
	}
}

// restoreReset takes a snapshot's reset record.
func (s *State) restoreReset(r *allotpb.Reset) error {
	l := &s.resets
	last := l.floor
	if n := len(l.list); n > 0 {
		last = l.list[n-1].GetVersion()
	}
	if r.GetRule() == "" || r.GetVersion() <= last || r.GetVersion() > l.version || len(l.list) >= MaxResets {
		return fmt.Errorf("reset of %q at version %d: not one the header's version %d and floor %d allow after version %d", r.GetRule(), r.GetVersion(), l.version, l.floor, last)
	}
	l.list = append(l.list, r)
	return nil
}
