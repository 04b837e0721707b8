// Package shardroute splits the reports of one reporter (an agent, or a
// coordinator speaking for an Envoy RLQS stream) among the shard groups
// of a region, exactly once per group (docs/coordinator.md#shard-groups).
//
// It sits below both the agent and the coordinator, so that the gateway
// library routes as the coordinator does without linking anything of the
// coordinator's, and so that one implementation of the protocol's hardest
// rule holds everywhere: a part of a report whose fate is unknown is sent
// again unchanged, to the same group, under the same sequence number, and
// only a part a group refused outright is cut again.
package shardroute
