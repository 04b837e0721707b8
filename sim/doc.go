// Package sim is Allot's simulator. It runs a fleet of gateways, the
// traffic that reaches them and the failures that befall them in virtual
// time, so that a minute of a hundred nodes at a million requests a second
// runs in seconds and gives the same answer for the same seed.
//
// It drives the real code: every node of the quota-lease strategy is an
// agent.Agent deciding each request with package algo, reporting to a
// allocator.Engine that allocates with package lease. Only the network
// (delay, jitter, loss, outages, partitions) and the clocks are simulated.
// The same traffic also meets three other strategies, so their costs can
// be compared side by side: a central counter (exact, one store round trip
// per request), a local even split (limit ÷ nodes, no coordination), and
// Gubernator's asynchronous GLOBAL mode.
//
// docs/accuracy.md has the results and the commands that reproduce them.
package sim
