// Package fsmpb holds the coordinators' log and snapshot schema: the
// commands Raft replicates and the records a snapshot is made of. It is
// internal: only the state machine writes and reads it. fsm.proto is the
// source; fsm.pb.go is generated from it by `make proto` with pinned
// protoc and plugin versions, and committed.
//
// Every existing cluster's log and snapshots are in this schema: fields
// are only ever added, never renumbered or retyped.
package fsmpb

//go:generate make -C ../../../.. proto
