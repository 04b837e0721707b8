// Package spawn holds what the programs that run real allot processes on
// loopback share: the demo's coordinators and the chaos harness's whole
// fleet. Each child runs in a process group of its own (so a signal
// reaches everything it started, and a Ctrl-C at the terminal reaches
// only the parent, which then stops it), dies with its parent on Linux,
// listens on a port no outgoing connection can take while it is down
// between a kill and a restart, and never inherits the parent's ALLOT_
// settings.
package spawn
