// Package coordinator is the cluster the platform team runs: three or five
// members replicated with Raft, which collect usage from every gateway's
// agent, divide each global allowance among the nodes in proportion to
// their demand, and keep the usage ledger billing jobs read.
//
// It is never on the request path. Agents call it once per reporting
// interval; a request is decided in the gateway's memory against the
// node's leases.
//
// # What is replicated, and what is not
//
// Raft replicates, through a thin FSM that hands each log entry to a state
// layer, what must survive any failure: the rules; the usage ledger
// (admitted and denied totals per tenant, rule, region and billing window);
// for every agent incarnation, the last usage batch applied, so that a
// batch retried after a timeout or a failover is counted exactly once; the
// members' addresses; the coordinator epoch; and the settings every member
// must agree on (billing window, report interval, lease TTL), fixed by the
// cluster's first leader.
//
// Demand and grants are not replicated. They change every interval and are
// rebuilt from the next round of reports, so they live on the leader only
// (package coordinator/allocator, which the simulator runs too). A new leader starts a new epoch and, for one lease period,
// grants no node more than it reports holding, so a failover never
// double-grants an allowance.
//
// Reports are batched into one Raft entry per apply window; an agent's
// usage is acknowledged only once its entry is committed, and the agent
// re-sends it until then. A report's demand is divided only after its
// usage is committed, and only by a member that has confirmed since the
// report arrived that it still leads (see agentServer.Report). docs/coordinator.md describes the state machine,
// the failover sequence and the operations runbook.
//
// # Where things are
//
// The files are named by job: coordinator.go, config.go and metrics.go
// wire a member; endpoint.go and endpoint_*.go are its gRPC and HTTP
// endpoints, a service a file; leader.go and leader_*.go the leader's
// term and its loops (rounds, export to the ledger sink, the parent
// tier); member_*.go how a member forms, joins and keeps its place in a
// cluster; offline.go what is done on a stopped member's data dir. The
// parts with a boundary of their own are packages: rlqs (Envoy's front
// door), and under internal/ the state machine (fsm), the shard group
// (shardgroup, with slotmove's step function), the report path's bounds,
// batcher and leadership check (intake), who may call what (authz) and
// Raft's network (raftnet). docs/architecture.md has the package map.
package coordinator
