// Package agentdrive lets the simulator carry an agent's reports itself,
// in virtual time, without the gateway's API offering it the hooks.
//
// The simulator runs real agents (package agent) against the real
// allocator, and needs what no gateway does: an agent that starts no
// goroutine, whose reports it prepares, carries through a simulated
// network and answers at the virtual times it chooses. Were those hooks
// exported by package agent, every gateway embedding it would see them,
// and a reader of its API would wonder what to do with them.
//
// So they live here, in a package only this module can import, and reach
// the agent through the one extension point it already has: a Transport
// given as agent.Config.Transport that is also this package's Transport
// (it has a Drive method) makes agent.New start no background goroutine
// and hand its Reports to Drive before it returns. No package outside the
// module can write such a Transport, since Drive's parameter is a type of
// this internal package; the agent keeps no global hook, and nothing in
// its documentation says a simulator exists. The layering test keeps the
// importers of this package to the agent and the simulator.
package agentdrive
