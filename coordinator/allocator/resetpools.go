package allocator

import allotpb "github.com/allot-io/allot/proto"

// ResetPools counts the pools a reset names, the key's or every one of
// the tenant's under the rule, and, when reset is set, forgets what the
// nodes spent in them: the next division starts from what the nodes,
// reset too, say they spent since.
//
// What each node holds stays counted, as at a window boundary (observe).
// A node keeps its lease through a reset and spends it again from zero,
// and one slow to hear of the reset (its reports late or failing) goes on
// holding it unseen. Dropping the pool forgot those leases: after one
// report interval, the node that reported first was handed the whole
// quota on top of them (10 + 4 of a quota of 10 over two agents,
// TestResetKeepsLeasesCounted). A lease stops counting as it always does,
// when its node reports holding less or its claim expires with the lease.
func (a *Allocator) ResetPools(r *allotpb.Reset, reset bool) int {
	if !r.GetAllKeys() {
		k := poolKey{r.GetRule(), r.GetKey()}
		sh := a.shard(k)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		p, ok := sh.pools[k]
		if !ok {
			return 0
		}
		if reset {
			p.forgetSpent()
			sh.markDirty(p)
		}
		return 1
	}
	tenant := allotpb.BoundName(r.GetTenant()) // as demand carries it
	n := 0
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for k, p := range sh.pools {
			if k.rule == r.GetRule() && p.tenant == tenant {
				n++
				if reset {
					p.forgetSpent()
					sh.markDirty(p)
				}
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// forgetSpent starts the pool's count of what was spent afresh, keeping
// what each node holds; the caller has it divided again at the next round.
func (p *pool) forgetSpent() {
	for _, c := range p.classes {
		for i := range c.claims {
			c.claims[i].committed, c.claims[i].prior = 0, 0
		}
	}
}
