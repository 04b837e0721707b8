package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/internal/shard"
)

// ShardsSpec splits a region's coordinators into shard groups
// (docs/coordinator.md#shard-groups). Group i starts owning an equal
// range of the slots (i × 16384 / Groups onwards); group 0 is home. Each
// group's leader is a server that takes Capacity key entries a second,
// one report at a time in arrival order: a report's answer waits for the
// reports ahead of it, then for its own entries ÷ Capacity.
type ShardsSpec struct {
	Groups int `yaml:"groups"`
	// Capacity is a group leader's key entries a second (default
	// 1,100,000, docs/coordinator.md#figures).
	Capacity float64 `yaml:"capacity"`
	// Scale is how many key entries of cost each simulated entry (a
	// demand or a usage count in a report) counts for (default 1): the
	// simulated fleet is smaller than the one it stands for.
	Scale float64 `yaml:"scale"`
	// Step is the time between a move's steps (default the mover's,
	// allocator.MoveStepInterval).
	Step time.Duration `yaml:"step"`
}

// DefaultLeaderCapacity is a group leader's key entries a second, as
// measured on 2 cores (docs/coordinator.md#figures).
const DefaultLeaderCapacity = 1_100_000

func (g *ShardsSpec) capacity() float64 {
	if g.Capacity > 0 {
		return g.Capacity
	}
	return DefaultLeaderCapacity
}

func (g *ShardsSpec) scale() float64 {
	if g.Scale > 0 {
		return g.Scale
	}
	return 1
}

func (g *ShardsSpec) step() time.Duration {
	if g.Step > 0 {
		return g.Step
	}
	return allocator.MoveStepInterval
}

// firstSlot is the first slot group i owns at the start.
func (g *ShardsSpec) firstSlot(i int) int { return i * shard.Slots / g.Groups }

// initialGroup is the group owning a slot at the start.
func (g *ShardsSpec) initialGroup(slot int) int {
	for i := g.Groups - 1; i > 0; i-- {
		if slot >= g.firstSlot(i) {
			return i
		}
	}
	return 0
}

// groupName names group i.
func groupName(i int) string { return fmt.Sprintf("g%d", i) }

func (g *ShardsSpec) validate(s *Scenario) error {
	if g == nil {
		return nil
	}
	switch {
	case g.Groups < 2 || g.Groups > 256:
		return fmt.Errorf("groups: must be between 2 and 256, got %d", g.Groups)
	case g.Capacity < 0 || g.Capacity > 1e10:
		return fmt.Errorf("capacity: must be between 0 (%d key entries a second) and 1e10, got %v", DefaultLeaderCapacity, g.Capacity)
	case g.Scale < 0 || g.Scale > 1e6:
		return fmt.Errorf("scale: must be between 0 (1) and 1e6, got %v", g.Scale)
	case g.Step < 0 || g.Step > time.Minute:
		return fmt.Errorf("step: must be between 0 (%v) and 1m, got %v", allocator.MoveStepInterval, g.Step)
	case s.Regions != nil:
		return errors.New("shards are simulated in one region: drop regions")
	}
	return nil
}

// validMove refuses a move of slots that are not a range of one group's
// starting slots, to that group itself, or overlapping an earlier move.
func (g *ShardsSpec) validMove(m *MoveSlotsEvent, before []Event) error {
	switch {
	case g == nil:
		return errors.New("needs shards")
	case m.First < 0 || m.Last < m.First || m.Last >= shard.Slots:
		return fmt.Errorf("first..last must be a range of 0..%d, got %d..%d", shard.Slots-1, m.First, m.Last)
	case m.To < 0 || m.To >= g.Groups:
		return fmt.Errorf("to: no group %d (groups 0..%d)", m.To, g.Groups-1)
	case g.initialGroup(m.First) != g.initialGroup(m.Last):
		return fmt.Errorf("slots %d..%d start in more than one group: move one group's slots at a time", m.First, m.Last)
	case g.initialGroup(m.First) == m.To:
		return fmt.Errorf("slots %d..%d are group %d's already", m.First, m.Last, m.To)
	}
	for _, e := range before {
		if o := e.MoveSlots; o != nil && o.First <= m.Last && m.First <= o.Last {
			return fmt.Errorf("slots %d..%d overlap an earlier move's (%d..%d)", m.First, m.Last, o.First, o.Last)
		}
	}
	return nil
}

// moveWindow is the part of a run a move of slots disturbs: its steps,
// and the new owner's learning period (a lease period) with one more
// interval to hand out what it learned.
func (s *Scenario) moveWindow(at time.Duration) [2]time.Duration {
	return [2]time.Duration{at, at + 3*s.Shards.step() + time.Duration(allocator.DefaultLeaseIntervals+1)*s.Interval}
}

// movedTenants are the tenants whose slots a move_slots event moves, nil
// without one.
func movedTenants(e *env) map[int]bool {
	var out map[int]bool
	for _, ev := range e.s.Events {
		m := ev.MoveSlots
		if m == nil {
			continue
		}
		if out == nil {
			out = map[int]bool{}
		}
		for i, t := range e.tenants {
			if sl := int(shard.Of(t)); sl >= m.First && sl <= m.Last {
				out[i] = true
			}
		}
	}
	return out
}
