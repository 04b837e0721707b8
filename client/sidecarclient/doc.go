// Package sidecarclient asks an Allot sidecar (allot agent --grpc-addr)
// for decisions over its gRPC CheckStream.
//
// A Go service links the agent and decides in its own memory; this client
// is for processes that share one agent on a host (many workers of one
// service, or tools), and it is the reference for clients in other
// languages: what it does is what makes the sidecar fast.
//
// The cost of a sidecar check is the round trip, not the decision: framing,
// system calls and waking processes take tens of microseconds, the
// decision well under one. So the client keeps one stream open and
// coalesces the checks its callers make concurrently into batches: a
// caller's check goes in the next batch to leave, which leaves as soon as
// the stream has room (a few batches in flight at once), never on a timer.
// An idle client sends each check alone, with no added delay; a busy one
// sends tens of checks per message and pays the round trip once for all of
// them. Each caller still waits for its own answer, and the sidecar
// decides every check exactly as the library would.
package sidecarclient
