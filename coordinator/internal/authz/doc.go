// Package authz decides who may call what on a coordinator member: it
// identifies a caller by bearer token and client certificate, checks the
// roles each gRPC method is open to (a method not listed is the admins'),
// binds an agent's reports to the node and region its credential names
// and a balance credential's reads to its one tenant, and counts and logs
// each refusal, at most once a minute per peer, so that a flood of
// refused calls cannot flood the log.
//
// docs/security.md is the table of roles and methods this package holds.
package authz
