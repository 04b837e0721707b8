// Package envoy answers Envoy's rate limit service from an agent's memory.
//
// Envoy's ratelimit filter (envoy.filters.http.ratelimit) asks a gRPC
// service, envoy.service.ratelimit.v3.RateLimitService, whether a request's
// descriptors are over their limits. The usual server, envoyproxy/ratelimit,
// keeps a counter per descriptor in Redis, so every request costs a Redis
// round trip and the limit is only as available as Redis. Served here, the
// answer comes from the local agent: the sidecar decides in memory against
// the node's leases, as the library does for Go gateways, and the
// coordinators divide each limit among the sidecars by demand.
//
// Descriptors map to Allot's descriptor rules (scope descriptor): a rule
// matches a domain and the entries of a descriptor, in order, and is keyed
// by the entries' values. Which rule applies to a descriptor follows
// envoyproxy/ratelimit, so that a migrated configuration (allot rules
// import --from envoy-ratelimit) answers the same requests the same way.
//
// Envoys that call an external authorizer (the ext_authz filter) get the
// sidecar's forward-auth decision instead: the attributes read from the
// request's headers, as /v1/authz reads them for nginx and Caddy.
package envoy
