package allocator_test

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// scenarioNode is one agent's side of the exchange with an Engine, held
// by hand as agent.Agent holds it: the leases it was sent, renewed and
// switched at window boundaries as the agent does, and its usage batches,
// sent again until acknowledged.
type scenarioNode struct {
	name    string
	inc     uint64
	running bool
	demand  []standingDemand
	leases  map[leaseKey]*heldLease
	// committed counts what the node admitted in its current window, per
	// window rule's key.
	committed map[leaseKey]*windowCount
	rulesVer  uint64
	nodes     uint32                // the fleet the last answer counted
	seq       uint64                // the last usage batch made
	pending   []*allotpb.UsageBatch // not acknowledged yet, oldest first
}

// standingDemand is a demand line: what the node reports every second
// until another report replaces it.
type standingDemand struct {
	d *allotpb.KeyDemand
	// committed is set when the line gives the window's count.
	committed bool
}

// leaseKey names what a lease is for: a key of a rule, and for a global
// rule a class (tenant and priority).
type leaseKey struct {
	rule, key, tenant string
	priority          uint32
	fair              bool
}

func (k leaseKey) String() string {
	if k.fair {
		return fmt.Sprintf("%s class=%s/%d", k.rule, k.tenant, k.priority)
	}
	return k.rule + " " + k.key
}

func compareKeys(x, y leaseKey) int {
	return cmp.Or(cmp.Compare(x.rule, y.rule), cmp.Compare(x.key, y.key), cmp.Compare(x.tenant, y.tenant), cmp.Compare(x.priority, y.priority))
}

// keyOf names a lease or demand of rule r for a key, tenant and priority.
func keyOf(r rules.Rule, key, tenant string, priority uint32) leaseKey {
	if r.Fair() {
		return leaseKey{rule: r.Name, tenant: tenant, priority: priority, fair: true}
	}
	return leaseKey{rule: r.Name, key: key}
}

type heldLease struct {
	held, next float64 // what the node enforces now, and from the next window
	window     int64   // the lease's window (window rules), Unix ns
	expires    int64
	epoch, seq uint64
}

type windowCount struct {
	window int64
	count  float64
}

// restart is a new process under the node's name: nothing held, nothing
// pending, a new incarnation.
func (n *scenarioNode) restart() {
	n.inc++
	clear(n.leases)
	clear(n.committed)
	n.pending, n.seq, n.rulesVer, n.nodes = nil, 0, 0, 0
}

// queue seals a usage batch.
func (n *scenarioNode) queue(counts []*allotpb.UsageCount, now time.Time) {
	hour := now.Truncate(time.Hour).Unix()
	for _, c := range counts {
		c.WindowUnix = hour
	}
	n.seq++
	n.pending = append(n.pending, &allotpb.UsageBatch{Seq: n.seq, Counts: counts, CutUnixNano: now.UnixNano()})
}

// held returns the keys of the leases the node holds at now, in order.
func (n *scenarioNode) held(now time.Time) []leaseKey {
	var ks []leaseKey
	for k, l := range n.leases {
		if l.expires > now.UnixNano() {
			ks = append(ks, k)
		} else {
			delete(n.leases, k)
		}
	}
	slices.SortFunc(ks, compareKeys)
	return ks
}

// request builds a report of a second of the node's demand at now.
func (n *scenarioNode) request(rs map[string]rules.Rule, now time.Time, leaving bool) *allotpb.ReportRequest {
	req := &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: n.name, Incarnation: n.inc, Region: scenarioRegion,
		SentUnixNano: now.UnixNano(), IntervalNano: int64(time.Second), RulesVersion: n.rulesVer, Leaving: leaving,
	}
	if len(n.pending) > 0 {
		req.Usage = n.pending[0]
	}
	n.held(now) // drops the expired
	for _, sd := range n.demand {
		r, ok := rs[sd.d.GetRule()]
		if !ok {
			continue // the rule is gone
		}
		d := &allotpb.KeyDemand{Rule: sd.d.Rule, Key: sd.d.Key, Tenant: sd.d.Tenant, Plan: sd.d.Plan, Priority: sd.d.Priority,
			Admitted: sd.d.Admitted, Denied: sd.d.Denied, Committed: sd.d.Committed}
		k := keyOf(r, d.Key, d.Tenant, d.Priority)
		l := n.leases[k]
		if r.Algorithm.Windowed() {
			w := now.Truncate(r.Period).UnixNano()
			d.WindowUnixNano = w
			if l != nil && w >= l.window+int64(r.Period) && l.next > 0 {
				l.held = l.next // the lease's window is over: its next count holds
			}
			if !sd.committed {
				// The node admits no more than its count for the window
				// allows: its lease's, or its unleased share.
				wc := n.committed[k]
				if wc == nil || wc.window != w {
					wc = &windowCount{window: w}
					n.committed[k] = wc
				}
				count := float64(r.LimitFor(d.Tenant, d.Plan)) / float64(max(n.nodes, 1))
				if l != nil {
					count = l.held
				}
				admitted := min(d.Admitted, max(math.Floor(count-wc.count+1e-9), 0))
				d.Denied += d.Admitted - admitted
				d.Admitted = admitted
				wc.count += admitted
				d.Committed = wc.count
			}
		}
		if l != nil && !leaving {
			d.Held, d.HeldEpoch, d.HeldSeq = l.held, l.epoch, l.seq
			if r.Algorithm.Windowed() {
				d.NextHeld = l.next
			}
		}
		req.Demand = append(req.Demand, d)
	}
	return req
}

// apply takes the answer to req: the batches acknowledged, the leases
// sent, the renewal of those reported held.
func (n *scenarioNode) apply(rs map[string]rules.Rule, req *allotpb.ReportRequest, resp *allotpb.ReportResponse) {
	for len(n.pending) > 0 && resp.GetAckedSeq() >= n.pending[0].GetSeq() {
		n.pending = n.pending[1:]
	}
	n.rulesVer, n.nodes = resp.GetRulesVersion(), resp.GetNodes()
	if req.GetLeaving() {
		clear(n.leases)
		return
	}
	got := map[leaseKey]bool{}
	for _, pl := range resp.GetLeases() {
		r, ok := rs[pl.GetRule()]
		if !ok {
			continue
		}
		k := keyOf(r, pl.GetKey(), pl.GetTenant(), pl.GetPriority())
		got[k] = true
		l, had := n.leases[k]
		if had && !(lease.Lease{Epoch: pl.GetEpoch(), Seq: pl.GetSeq()}).Supersedes(lease.Lease{Epoch: l.epoch, Seq: l.seq}) {
			l.expires = max(l.expires, pl.GetExpiresUnixNano())
			continue
		}
		if !(pl.GetLimit() > 0) {
			delete(n.leases, k)
			continue
		}
		nl := &heldLease{held: pl.GetLimit(), next: pl.GetLimit(), window: pl.GetWindowUnixNano(), expires: pl.GetExpiresUnixNano(), epoch: pl.GetEpoch(), seq: pl.GetSeq()}
		if pl.GetNextLimit() > 0 {
			nl.next = pl.GetNextLimit()
		}
		n.leases[k] = nl
	}
	// Every lease the report said it held and the answer did not replace
	// is renewed.
	if renew := resp.GetRenewUnixNano(); renew > 0 {
		for _, d := range req.GetDemand() {
			r, ok := rs[d.GetRule()]
			if !ok {
				continue
			}
			k := keyOf(r, d.GetKey(), d.GetTenant(), d.GetPriority())
			if l := n.leases[k]; l != nil && !got[k] && d.GetHeldEpoch() == l.epoch && d.GetHeldSeq() == l.seq {
				l.expires = max(l.expires, renew)
			}
		}
	}
}

// lowered returns the keys whose lease resp lowered, as the agent notes
// them (agent hotKey.confirm): it says at once, in an early report, that
// it holds the smaller lease.
func (n *scenarioNode) lowered(rs map[string]rules.Rule, before map[leaseKey]heldLease) []leaseKey {
	var ks []leaseKey
	for k, l := range n.leases {
		if b, ok := before[k]; ok && (l.held < b.held || l.next < b.next) {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, compareKeys)
	return ks
}

// confirm builds the early report that says the node holds the leases of
// keys: no usage, no demand counted, the leases held.
func (n *scenarioNode) confirm(rs map[string]rules.Rule, now time.Time, keys []leaseKey) *allotpb.ReportRequest {
	req := &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: n.name, Incarnation: n.inc, Region: scenarioRegion,
		SentUnixNano: now.UnixNano(), IntervalNano: int64(time.Second), RulesVersion: n.rulesVer, Urgent: true,
	}
	for _, sd := range n.demand {
		r, ok := rs[sd.d.GetRule()]
		if !ok {
			continue
		}
		k := keyOf(r, sd.d.GetKey(), sd.d.GetTenant(), sd.d.GetPriority())
		l := n.leases[k]
		if l == nil || !slices.Contains(keys, k) {
			continue
		}
		d := &allotpb.KeyDemand{Rule: sd.d.Rule, Key: sd.d.Key, Tenant: sd.d.Tenant, Plan: sd.d.Plan, Priority: sd.d.Priority,
			Held: l.held, HeldEpoch: l.epoch, HeldSeq: l.seq}
		if r.Algorithm.Windowed() {
			d.NextHeld = l.next
			d.WindowUnixNano = now.Truncate(r.Period).UnixNano()
			if wc := n.committed[k]; wc != nil && wc.window == d.WindowUnixNano {
				d.Committed = wc.count
			}
		}
		req.Demand = append(req.Demand, d)
	}
	return req
}

// snapshot copies what the node holds.
func (n *scenarioNode) snapshot() map[leaseKey]heldLease {
	out := make(map[leaseKey]heldLease, len(n.leases))
	for k, l := range n.leases {
		out[k] = *l
	}
	return out
}
