// Package resp serves the agent over the Redis protocol (RESP2 and, after
// HELLO 3, RESP3), so that a gateway in any language asks it with the
// Redis client it already has: pooled, pipelining and fast, which is how
// most teams rate-limit today (a Redis client and a Lua script).
//
// ALLOT.CHECK decides a request against every rule, as POST /v1/check
// does. CL.THROTTLE is redis-cell's command, its GCRA semantics and its
// five-integer reply, so that code written for redis-cell runs unchanged;
// the key's limit comes from the call and is coordinated across the fleet
// like any key of the descriptor rule that takes it. The connection commands clients send on connect (PING, HELLO,
// CLIENT SETNAME and SETINFO, SELECT 0, COMMAND, QUIT) are answered as
// Redis answers them, and pipelined commands are answered in one write.
//
// It is written for the hot path: one goroutine per connection, buffered
// reads and writes, arguments parsed in place and names interned per
// connection, so that a command for names seen before allocates nothing.
// A client cannot wedge a connection or the server: arguments, lines,
// pipelines and connections are bounded (docs/api.md#the-redis-protocol),
// and malformed input is answered with an error, after which the
// connection is closed as Redis closes it.
package resp
