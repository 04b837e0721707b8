package scenario

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Failure runs the script src with cmds and returns how it failed, or ""
// if it passed: for testing a runner's own error paths. The script runs
// on a testing.TB of its own, in a goroutine of its own, which a Fatal
// ends as testing.T's does; t fails if it does not end within 10 s.
func Failure(t *testing.T, src string, cmds Commands) string {
	t.Helper()
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunString(r, src, cmds)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("scenario: the script did not finish within 10s")
	}
	if !r.Failed() {
		return ""
	}
	if msg := r.String(); msg != "" {
		return msg
	}
	return "failed"
}

// recorder is a testing.TB that records failures rather than failing a
// test. The methods the runner does not call are the nil embedded TB's,
// and panic.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed bool
	msgs   []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Log(...any)                {}
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Error(args ...any)         { r.record(fmt.Sprint(args...)) }
func (r *recorder) Errorf(f string, a ...any) { r.record(fmt.Sprintf(f, a...)) }
func (r *recorder) Fatal(args ...any)         { r.record(fmt.Sprint(args...)); runtime.Goexit() }
func (r *recorder) Fatalf(f string, a ...any) { r.record(fmt.Sprintf(f, a...)); runtime.Goexit() }
func (r *recorder) FailNow()                  { r.record(""); runtime.Goexit() }

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) record(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	if msg != "" {
		r.msgs = append(r.msgs, msg)
	}
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "\n")
}
