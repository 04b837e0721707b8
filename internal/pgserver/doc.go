// Package pgserver starts a throwaway PostgreSQL server: initdb into a
// temporary directory, then a postmaster on a free loopback port that
// trusts local connections, for tests, the chaos harness and `allot demo`.
//
// It exists because the ledger's export to PostgreSQL (coordinator/
// ledgersink) is only worth testing against the real thing: the
// compare-and-set of the export position, COPY, ON CONFLICT, COLLATE "C"
// and the errors a server sends when it is read-only, full, shutting
// down or gone are PostgreSQL's behaviour, which no mock reproduces. And
// the failures worth testing are a process's: so the server is a child
// process this package can stop (SIGINT, a fast shutdown), crash
// (SIGKILL to the postmaster and every backend), freeze (SIGSTOP to all
// of them, a hung host) and start again on the same port and data
// directory, as the harness does to coordinators.
//
// Every signal goes to a PID this package started or found as the
// postmaster's child in /proc, never to a process by name, so other
// servers on the machine, the system's own included, are never touched.
// A server left running when this process dies is killed with it
// (PR_SET_PDEATHSIG).
//
// initdb and postgres refuse to run as root; as root, both run as the
// postgres OS user Debian's package creates, in directories chowned to
// it. The programs are found on PATH or in /usr/lib/postgresql/*/bin
// (the newest); Available says when they are not installed, and package
// pgtest turns that into a skip, or a failure under ALLOT_PG_TESTS=1.
//
// fsync stays on unless Options.Fast: a benchmark of commits on a server
// that does not sync measures nothing a deployment will see.
package pgserver
