// Package allocator divides each global allowance among the nodes that
// report demand for it. It holds the coordinator leader's soft state, the
// rounds that divide it, and the answer a report gets; and the Engine, a
// coordinator without Raft or network that the simulator drives in
// virtual time.
//
// # One allocator, two callers
//
// The leader and the simulator divide by the same code, which is why it
// is a package of its own rather than part of package coordinator. The
// leader commits a report's usage through Raft, then folds its demand in
// (Allocator.Take), divides the pools reports changed once per round
// (Allocator.Tick), and answers from the grants (Allocator.Reply). The
// Engine applies the usage to a state of its own and calls the same
// methods in the same order, each reading one view of its state
// (state.View), so a figure the simulator reports (docs/accuracy.md) is a
// figure of the production allocator. Slot moves take the same path: both
// carry them with package coordinator/internal/slotmove's step function. And the simulator links
// what this package links: no Raft, no bbolt, no PostgreSQL driver
// (internal/layering checks it).
//
// # Soft state only
//
// Nothing here is replicated. Demand and grants change every report
// interval and are rebuilt from the next round of reports, so they live on
// the leader only; a new leader forgets them, starts a new epoch and, for
// one lease period, grants no node more than it reports holding
// (Allocator.Lead; see package lease). The allocator reads the replicated
// state (coordinator/internal/state: rules, overrides, settings, the
// slots a shard group owns) and never writes it; only the Engine, standing
// in for the coordinator's FSM, applies commands to its own.
//
// The files: allocator.go (the soft state, terms and rounds), fold.go
// (a report folded in and answered), allocatepool.go (one pool's
// division), claims.go and leases.go (a node's claim and the lease it
// gets), keylimit.go and overrideview.go (a key's own limit, tenants'
// overrides), tier.go and tierearly.go (the tier between regions), slots.go
// and resetpools.go (slot moves, key resets), views.go (the status page's
// view), report.go (what the leader and the Engine answer with), and
// engine.go and engine_shards.go (the Engine).
package allocator
