// Command testreport runs go test commands with -json and prints what a
// person reads of go test (each package's ok or FAIL line, and the whole
// output of every test that failed), then where the time went: a table
// of every package's time, the slowest tests, and the steps before the
// tests (the Debian installs, the build) that the Makefile timed. A run
// of make test that takes too long says in its own output what to cut.
//
// With -repeat it is the report of make test-repeat: the same tests run
// many times (go test -count=N), and the table says, per test, how many
// runs failed; every failure's output, with the seed or log it names, is
// printed as it happens.
//
// It exits 1 if any command failed or any test failed, and writes the raw
// events to -json FILE when asked, for a closer look.
package main
