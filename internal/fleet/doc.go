// Package fleet runs a real Allot fleet on loopback for the harnesses
// that measure it (tools/chaos, tools/accuracy, tools/fleetload): it builds the
// allot binary, lays out three `allot coordinator` members and any number
// of `allot agent` sidecars on free loopback ports, starts, stops, kills,
// pauses and restarts them, finds the Raft leader, and reads what the
// processes say of themselves: their metrics, by name, and their CPU and
// memory from /proc. Every child is started through package spawn: its
// own process group, dead with its parent on Linux.
package fleet
