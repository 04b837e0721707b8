// Package auth decides who may call a coordinator, and gives clients the
// credentials to prove who they are.
//
// A rate limiter's ledger is a bill, and its leases are capacity: whoever
// can report usage writes into invoices, and whoever can invent nodes
// shrinks every real gateway's share. So every call names a caller, and
// every caller has one of three roles:
//
//   - agent: reports usage and receives leases, only as the nodes its
//     credential names;
//   - reader: reads usage, status and rules (billing jobs, dashboards);
//   - admin: everything, including rules, membership and backups.
//
// Coordinator members present a fourth, member, to each other: what an
// admin may do, granted by a member certificate.
//
// A caller proves its role with a bearer token or a client certificate.
// Tokens are listed in a file the coordinator re-reads when it changes,
// each with a name, a role and, for agents, the node IDs it may report
// as; several can be valid at once, so a token is rotated by adding the
// new one, moving clients over, and removing the old. A client
// certificate carries its role and name in a URI SAN whose path ends in
// /allot/<role>/<name> (spiffe://example.org/allot/agent/gw-17); a certificate
// without one is an agent for the names in its common name and DNS
// names, as before roles existed.
//
// Certificates, keys, CA bundles and token files are all re-read when
// they change on disk, checked at most once a second, so rotation never
// needs a restart; a file that fails to parse leaves the last good one in
// force and is reported.
package auth
