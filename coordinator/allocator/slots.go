package allocator

import "github.com/allot-io/allot/internal/shard"

// learningRange is a range of slots a move gave this group, and when its
// learning period ends (ns).
type learningRange struct {
	first, last shard.Slot
	until       int64
}

// LearnSlots puts the keys of slots first..last in learning mode for one
// lease period: their nodes hold the source group's leases, which this
// leader did not grant, and dividing the whole limit at once would grant
// it twice. Ranges whose period is over are dropped.
func (a *Allocator) LearnSlots(first, last shard.Slot, now int64) {
	next := []learningRange{{first: first, last: last, until: now + a.ttl.Load()}}
	if cur := a.acquired.Load(); cur != nil {
		for _, l := range *cur {
			if l.until > now {
				next = append(next, l)
			}
		}
	}
	a.acquired.Store(&next)
}

// slotLearning reports whether a tenant's slot is in a learning period.
func (a *Allocator) slotLearning(tenant string, now int64) bool {
	cur := a.acquired.Load()
	if cur == nil {
		return false
	}
	var s shard.Slot
	hashed := false
	for _, l := range *cur {
		if l.until <= now {
			continue
		}
		if !hashed {
			s, hashed = shard.Of(tenant), true
		}
		if l.first <= s && s <= l.last {
			return true
		}
	}
	return false
}
