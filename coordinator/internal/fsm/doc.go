// Package fsm is the coordinators' Raft state machine: a thin layer that
// decodes each log entry (one command-type byte, then a protobuf payload)
// and hands it to the replicated state, and that snapshots and restores
// that state for Raft, for backups and for the offline tools (allot
// cluster recover and inspect).
//
// Why a package of its own: the state machine is what every replica must
// compute identically from the same log, and what every existing
// cluster's log and snapshots are read with. Kept apart from gRPC, RLQS,
// the UI and auth, nothing but this package's small API (Apply, Read,
// Snapshot, Restore, CheckEntry) reaches it, and the state itself lives in
// the sub-package state, which imports neither Raft nor a clock (a test
// there checks its imports), so that the compiler, not a comment, keeps
// Raft and time out of what must be deterministic.
//
// What this layer decides: an entry of a command type this version does
// not know stops the node unless the type has the ignorable bit, and an
// entry that does not decode stops it too, rather than let the replica
// diverge; CheckEntry finds both at start-up, before Raft runs.
package fsm
