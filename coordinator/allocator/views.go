package allocator

import (
	"slices"
	"time"
)

// The allocator's soft state as the status page shows it (/v1/ui's pools
// and agents): only the leader has it.

// PoolView is one key's division among the gateways.
type PoolView struct {
	Rule      string      `json:"rule"`
	Key       string      `json:"key"`
	Limit     float64     `json:"limit"`
	Demand    float64     `json:"demand"`
	Contended bool        `json:"contended"`
	Claims    []ClaimView `json:"claims"`
}

// ClaimView is one node's part in a PoolView: its lease and its smoothed
// demand.
type ClaimView struct {
	Node string `json:"node"`
	// Tenant is the class's tenant on a global rule, whose pool is shared
	// by tenants: one node has a claim for each.
	Tenant string  `json:"tenant,omitempty"`
	Lease  float64 `json:"lease"`
	Demand float64 `json:"demand"`
}

// NodeView is a node the leader has heard from in its term.
type NodeView struct {
	Node     string    `json:"node"`
	Region   string    `json:"region"`
	LastSeen time.Time `json:"last_seen"`
	Silent   bool      `json:"silent"` // no report for a lease period: its rules are on their fail modes
}

// Divisions is the busiest pools' division among nodes, and every node
// heard from, for the status page.
func (a *Allocator) Divisions(now int64, n int) ([]PoolView, []NodeView) {
	a.mu.Lock()
	names := make(map[int32]string, len(a.nodes))
	var agents []NodeView
	ttl := a.ttl.Load()
	for name, info := range a.nodes {
		names[info.index] = name
		agents = append(agents, NodeView{Node: name, Region: info.region, LastSeen: time.Unix(0, info.lastSeen), Silent: now-info.lastSeen > ttl})
	}
	a.mu.Unlock()
	slices.SortFunc(agents, func(x, y NodeView) int { return compareStrings(x.Node, y.Node) })
	var pools []PoolView
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for k, p := range sh.pools {
			up := PoolView{Rule: k.rule, Key: k.key, Limit: p.limit, Contended: p.contended}
			for _, cl := range p.classes {
				tenant := ""
				if p.rule != nil && p.rule.Fair() {
					tenant = cl.key.tenant
				}
				for _, claim := range cl.claims {
					up.Demand += claim.est
					up.Claims = append(up.Claims, ClaimView{Node: names[claim.node], Tenant: tenant, Lease: claim.grant, Demand: claim.est})
				}
			}
			pools = append(pools, up)
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(pools, func(x, y PoolView) int {
		switch {
		case x.Demand > y.Demand:
			return -1
		case x.Demand < y.Demand:
			return 1
		}
		return compareStrings(x.Rule+x.Key, y.Rule+y.Key)
	})
	return pools[:min(len(pools), n)], agents
}

// PoolLimit is the limit a rule's key is divided by (a plan's, a parent's
// lease), if the allocator has a pool of it.
func (a *Allocator) PoolLimit(rule, key string) (float64, bool) {
	k := poolKey{rule, key}
	sh := a.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.pools[k]
	if p == nil {
		return 0, false
	}
	return p.limit, true
}
