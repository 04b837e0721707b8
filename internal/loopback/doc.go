// Package loopback picks loopback ports for the processes and clusters the
// tests and harnesses start.
//
// Port 0 asks the kernel for a port from its ephemeral range, the same
// range it draws the local ports of outgoing connections from. A member
// stopped and started again on the port it had (a restart, a recovery, a
// SIGKILL in a chaos run) can then find it taken by some connection made
// meanwhile, by another test or by the cluster itself: "bind: address
// already in use" in TestRecoverLostQuorum. Ports below that range are
// handed out only to whoever asks for them by number.
package loopback
