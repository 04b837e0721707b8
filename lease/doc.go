// Package lease is the arithmetic at the heart of Allot: how one global
// allowance is divided among the gateway nodes that enforce it, so that the
// fleet as a whole admits what the limit says while every node decides its
// requests alone, in memory.
//
// Every reporting interval each node tells the coordinator, per rule and
// key, what it admitted and denied. The coordinator smooths those
// observations into a demand per node (Estimator), divides the allowance in
// proportion to demand (Allocate), or first among tenants by weighted
// max-min fairness and priority and then among nodes (AllocateFair), and
// hands each node a Lease: its share of the rate and burst, or of the
// current window's count, until an expiry.
//
// Everything here is a pure function of its inputs. Nothing reads a clock,
// touches the network or keeps state between calls: the coordinator owns
// the state, the simulator replays it in virtual time, and the tests drive
// it round by round.
//
// # Why proportional, and why two levels
//
// The nodes sharing one key's allowance are replicas serving the same
// subject, put there by a load balancer. No node deserves a larger fraction
// of its requests admitted than another, so within one key Allot splits the
// allowance in proportion to demand: every request of the subject has the
// same chance, whichever gateway it reached. Fairness is a question between
// subjects, so it is answered one level up: the tenants sharing a global
// capacity rule are given weighted max-min fair shares by priority, and
// each tenant's share is then split among nodes by demand. Doorman's
// proportional share, by contrast, fully serves every node below an equal
// share, which favours whichever gateway happens to see less of the subject.
//
// # Safety while leases change hands
//
// A node keeps using its old lease until it receives the new one. When one
// node's share shrinks and another's grows in the same round, both can be
// spending at once. Allocate therefore funds increases only from capacity
// no node still holds, plus the intent's tolerance: the sum over nodes of
// the larger of the lease held and the lease granted never exceeds
// Limit × (1 + Tolerance). A new leader, which knows nothing of what was
// granted before it, goes further for one lease period (learning mode):
// either no node is granted more than it reports holding (Pool.Learning),
// or, as the coordinator does for rate rules, the pool's limit is cut to
// what the reporting nodes held when the new leader first heard from them.
//
// # Nodes arriving, leaving and starting out
//
//   - A node with no lease for a key enforces an even share of it,
//     UnleasedShare (the limit divided by the nodes it last heard of), and
//     asks for a lease in the background as soon as it has used a good part
//     of that. Most keys never come near their even share and never need a
//     lease, which keeps reports proportional to the keys that matter.
//   - A joining node is counted from its first report. Its first grant is
//     funded by capacity no other node holds plus the tolerance; in
//     learning mode it is granted nothing until the lease period ends and
//     keeps its even share meanwhile.
//   - A node that leaves cleanly sends a last report with zero demand and
//     Held 0, which frees its share in the next round. A node that just
//     goes quiet is kept as an absent Claim (Present false) until its lease
//     expires: what it may still be spending is counted, and it is granted
//     nothing new.
//   - A node whose lease expires with no coordinator in reach enforces
//     FallbackShare, by its rule's FailMode; package agent implements it.
package lease
