// Package fleet runs a real Allot fleet on loopback for the harnesses
// that measure it (cmd/chaos, cmd/accuracy): it builds the allot binary,
// lays out three `allot coordinator` members and any number of `allot
// agent` sidecars on free loopback ports, starts, stops, kills, pauses and
// restarts them, and finds the Raft leader. Every child is started through
// package spawn: its own process group, dead with its parent on Linux.
package fleet
