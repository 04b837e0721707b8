// Package state is everything the coordinators replicate through Raft:
// the rules, the members' addresses, the usage ledger, the report
// sequence of every agent run (so that a batch retried after a timeout or
// a failover counts once), the billing windows open and final, the epoch
// and the settings every member must agree on; and the commands that
// change them and the snapshot format that stores them.
//
// Every method is a deterministic function of the state and its
// arguments. The time a command needs comes in the command, on the
// proposing leader's clock; no clock is read here and Raft is not known
// here, so every replica reaches the same state from the same log.
// TestImports checks that: it fails the build of this package's tests on
// an import of Raft, or on a call that reads the clock.
//
// The FSM (package fsm) applies commands under its write lock and lets
// readers in under its read lock; what a reader gets (a *Member, the
// *rules.Set) is the state's own and must not be changed.
package state
