// Package intake is what stands between an agent's report and the
// leader's state: the bound on reports in flight (past it a report is
// shed, answered at once without being taken), the gate on node IDs
// never seen before, the batcher that commits the usage of many reports
// in one Raft entry per apply window, and the leadership check that the
// reports waiting at the same time share.
//
// Each part is a small concurrent type of its own, knowing nothing of the
// coordinator around it: the batcher is given the function that proposes
// its entry, the check the function that confirms leadership. The order
// in which a report passes them, and why, is agentServer.Report's, in
// package coordinator.
package intake
