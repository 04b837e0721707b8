// Package rlqs is the coordinators' front door for Envoy: its
// rate_limit_quota filter's RLQS streams, each served as one more agent.
//
// Envoy's rate_limit_quota filter enforces, in each Envoy, an assignment
// per bucket that a server hands out over a stream, and reports each
// bucket's usage on that stream every reporting interval: the lease model
// Allot's own agents follow. So each stream is served as one more agent:
// its reports become Allot reports, made by the coordinator on the
// stream's behalf under a node name it draws for the stream, and go
// through the same validation, ledger batching (exactly once per report),
// demand estimate and allocator as every agent's; the leases that come
// back become assignments.
//
// A bucket maps to a rule and key by its bucket id's entries: "rule"
// names the rule; the rule's key attributes are read from entries of the
// same names ("tenant", "user", "route", "ip"), or, for a descriptor rule,
// from entries named as its descriptor keys; "tenant" and "plan" are
// billed and select plan limits. A bucket whose rule is unknown, global,
// or whose id is malformed gets no assignment: Envoy applies its
// no_assignment_behavior. Its usage is billed under the rule it names
// once the rule is known; docs/gateways.md has the Envoy configuration.
//
// Nothing an Envoy sends ends its stream: the values of a bucket id come
// from request headers, so a malformed or oversized bucket is left without
// an assignment rather than costing the Envoy every bucket's.
//
// The package sees the member it runs on only through Intake: the rule
// set, two settings, and the way a stream's reports go. The member's side
// of that (its shard router, the way to its leader, here or forwarded)
// is the coordinator's (coordinator/endpoint_agent.go), so a stream's
// report takes the path an agent's does, and this package knows nothing
// of Raft, the ledger or the allocator.
package rlqs
