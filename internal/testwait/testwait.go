// Package testwait waits, in tests, for a condition to hold: it polls
// with a deadline, never a bare sleep, and fails the test naming what it
// waited for. Tests across the module share it instead of each package
// keeping a poll loop of its own.
package testwait

import (
	"testing"
	"time"
)

// Every is how often For polls.
const Every = 5 * time.Millisecond

// For polls cond until it holds, failing t after timeout with what it
// waited for.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(Every)
	}
}
