// Package agent is what a gateway imports: it decides every request in the
// gateway's own memory against the node's share of each limit, and reports
// usage to the coordinator cluster in the background.
//
// # Zero network hops per request
//
// Check reads a clock refreshed every millisecond in the background, hashes
// each attribute of the request once, and looks every rule's key up in
// sharded, pointer-free tables. It never waits for the network, holds no
// lock beyond one shard's for a few nanoseconds, and allocates nothing for
// a key it has seen before.
//
// # Asking without spending
//
// A Request with Peek (the sidecar's explicit cost of 0, forward-auth's
// cost header of 0, Envoy's hits_addend of 0) is answered as a request of
// its cost would be now, with the remaining before it, and spends nothing:
// no limit, no usage billed, no decision counted, no lease asked for.
// Peeks are counted apart, in allot_agent_peeks_total: for a UI that shows
// what is left.
//
// # Shares, leases and hot keys
//
// Every key of a coordinated rule starts on an even share of the limit (the
// limit divided by the nodes the coordinators hear from). A key that uses
// half of that share, or is refused, becomes hot: the agent reports its
// demand, and the coordinator answers with a lease sized to the node's part
// of the fleet's demand for that key. A leased key that runs low asks for
// an early report, so it is topped up before it runs dry — never during a
// request. Most keys never come near an even share and never cost the
// coordinator anything.
//
// # When the coordinator is out of reach
//
// Each rule fails by its intent, unless it names its own fail mode:
//
//	capacity  fallback  each node enforces limit ÷ nodes last seen
//	quota     open      keys keep their last lease, however old
//	abuse     closed    every request the rule covers is refused
//
// Running on a fail mode is loud: a gauge per rule, a counter of the
// decisions made on it, and a warning in the log when a rule goes onto it
// and comes back.
//
// # Time
//
// Window boundaries and billing windows follow the coordinators' clock: the
// agent learns the offset from every exchange, so a gateway whose clock is
// seconds off still agrees with the fleet. Rate algorithms (token bucket,
// GCRA) refill by the local monotonic clock instead, so that a step in the
// offset's estimate neither credits nor takes back refill (ruleState.at).
//
// docs/agent.md is the embedding guide.
package agent
