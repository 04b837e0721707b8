// Package shard is the arithmetic of shard groups, shared by the agent
// and the coordinator: which slot a tenant falls in, and which group a
// map sends each slot to.
//
// A region's coordinators can run as several independent Raft groups, so
// that the region grows past one leader's CPU, memory and disk. All of a
// tenant's keys, windows and ledger lines belong to one slot, and each
// slot to one group at a time, so a tenant's usage is counted in one log
// and its limits divided by one leader. The slot is a pure function of the
// tenant (FNV-1a 64 modulo Slots), so an agent routes a report without
// asking anyone, and a slot, not a tenant, is what moves between groups:
// a map of Slots entries stays small whatever the number of tenants.
//
// A Map is a routing hint. What a group owns is recorded in its own log
// and checked when usage is applied (coordinator/internal/state), so a
// stale map can send a report to the wrong group, which refuses it, but
// can never make a group count usage it does not own.
package shard
