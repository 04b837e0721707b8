package lease

import "time"

// Lease grants one node, for one rule and one key, a share of the rule's
// allowance until Expires.
//
// Amounts are in the rule's own units: Limit is per the rule's period, as
// the rule's limit is. For rate algorithms (token bucket, GCRA) the node
// enforces Limit per period with a Burst of its own; for window algorithms
// it may admit Limit in the current window (on the coordinators' clock),
// including what it had already admitted there.
type Lease struct {
	Node string
	Rule string
	Key  string

	Limit float64 // the node's share of the rule's limit, per period
	Burst float64 // the node's share of the burst (rate algorithms)
	// Window algorithms: Limit holds in the window starting at Window;
	// Next, when set, in every window after it, until a newer lease.
	Window time.Time
	Next   float64

	Expires time.Time
	// Epoch is the coordinator epoch that issued the lease; it increases
	// with every leader change. Seq increases with every allocation round
	// within an epoch. Together they order leases: see Supersedes.
	Epoch uint64
	Seq   uint64
}

// Supersedes reports whether l was issued after other, so that a lease
// delivered late or twice never replaces a newer one.
func (l Lease) Supersedes(other Lease) bool {
	if l.Epoch != other.Epoch {
		return l.Epoch > other.Epoch
	}
	return l.Seq > other.Seq
}

// Expired reports whether l no longer holds at now.
func (l Lease) Expired(now time.Time) bool { return !now.Before(l.Expires) }

// BurstShare returns the burst that goes with a share of a rule's limit:
// the same fraction of the rule's burst, so that the nodes' bursts add up
// to the rule's.
func BurstShare(ruleLimit, ruleBurst, share float64) float64 {
	if ruleLimit <= 0 {
		return 0
	}
	return ruleBurst * share / ruleLimit
}
