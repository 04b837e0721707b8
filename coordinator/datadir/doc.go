// Package datadir opens a coordinator member's data directory: its Raft
// log and stable store (raft.db, a bbolt file), its Raft snapshots and its
// cluster identity, each checked before anything reads it.
//
// A disk fails in more ways than it fills up. A bad sector or a bad
// restore overwrites pages, a copy taken while the file was in use is
// truncated, a volume is replaced by an empty one. Opened unchecked, the
// first makes bbolt panic on an invalid page and the second faults on
// memory mapped past the end of the file (SIGBUS, which no recover
// catches); the third starts a member with no memory of its term, its vote
// or the cluster it belonged to. Open therefore reads the file's meta and
// freelist pages with plain reads and checks their checksums and sizes
// against the page count before bbolt maps it, walks every page and runs
// bbolt's own consistency check, decodes every log entry, checks each
// snapshot's size and CRC, and turns every failure into one Error naming
// the file, what is wrong and the runbook section, having changed nothing.
//
// The identity file (identity.json) records the cluster a member belongs
// to. It outlives a lost raft.db, so a member can tell "new" (no identity,
// no state) from "lost" (an identity, no state): a lost member must never
// take part in forming a cluster, only rejoin the one it belonged to.
package datadir
