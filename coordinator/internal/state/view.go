package state

import (
	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// View is what a report reads of the state, at one applied entry: the
// rules, the settings, the members, the agent runs, the overrides, the
// resets and this group's slots. It is a copy of those parts that shares
// the copy-on-write trees with the state, made in O(1) (View), read by
// any number of goroutines without a lock while Apply goes on; nothing
// reaches it from later entries.
//
// A report read the state five or six times under the FSM's lock, each
// possibly at another entry: its answer could carry the rules of one and
// the overrides of the next. One view serves it whole. The ledger is not
// in a view: cloning its tree at every entry would have each entry copy
// the paths it changes, and no report reads it.
type View struct{ s State }

// View returns a view of the state as it stands. Like a snapshot's copy,
// it must be made under the FSM's write lock: cloning marks the trees.
func (s *State) View() *View {
	v := &View{s: State{
		epoch: s.epoch, billingWindow: s.billingWindow, reportInterval: s.reportInterval, leaseTTL: s.leaseTTL,
		rules: s.rules, clusterID: s.clusterID, slots: s.slots, shardMap: s.shardMap,
		members: s.members.Clone(), incarnations: s.incarnations.Clone(),
		ov: s.ov.clone(),
		// resets shares the state's list: appended to and cut from the
		// front only.
		resets: s.resets,
	}}
	return v
}

// Epoch is the coordinator epoch.
func (v *View) Epoch() uint64 { return v.s.epoch }

// Rules is the rule set.
func (v *View) Rules() *rules.Set { return v.s.rules }

// Settings are the cluster's settings fixed so far.
func (v *View) Settings() Settings { return v.s.Settings() }

// BillingWindowSeconds is the billing window in whole seconds.
func (v *View) BillingWindowSeconds() int64 { return v.s.BillingWindowSeconds() }

// Members are the member records, by ID.
func (v *View) Members() []*allotpb.Member { return v.s.Members() }

// LastSeq is the last usage batch applied for an agent run.
func (v *View) LastSeq(node string, incarnation uint64) (uint64, bool) {
	return v.s.LastSeq(node, incarnation)
}

// HasNode reports whether any incarnation of node has usage in the state.
func (v *View) HasNode(node string) bool { return v.s.HasNode(node) }

// OverridesVersion is the overrides' version.
func (v *View) OverridesVersion() uint64 { return v.s.OverridesVersion() }

// OverridesSince is what changed in the overrides since a version, at
// most limit of them (see State.OverridesSince).
func (v *View) OverridesSince(since uint64, limit int) *allotpb.OverridesDelta {
	return v.s.OverridesSince(since, limit)
}

// ResetsSince are the resets made since a version (see State.ResetsSince).
func (v *View) ResetsSince(since uint64, limit int, fresh bool) *allotpb.ResetsDelta {
	return v.s.ResetsSince(since, limit, fresh)
}

// Group is this shard group's ID: "" for a region never split.
func (v *View) Group() string { return v.s.Group() }

// Owner reports, per slot, whether this group owns it.
func (v *View) Owner() func(shard.Slot) bool { return v.s.Owner() }

// ShardMapVersion is the region's shard map version (the home group's).
func (v *View) ShardMapVersion() uint64 { return v.s.ShardMapVersion() }
