package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCheckLogs: Raft failing to reach a peer, a member back from its
// snapshot finding nothing new to snapshot, and a member catching up
// whose snapshot timer fires before it applied its configuration, are
// explained during a leader
// kill and its grace, not before it nor by a fault that stops no member;
// any other ERROR is never explained.
func TestCheckLogs(t *testing.T) {
	out := &strings.Builder{}
	h := newHarness(defaultConfig(), out)
	t0 := time.Now().UTC()
	h.faultSpans = []faultSpan{
		{kind: "leader-kill", from: t0.Add(10 * time.Second), to: t0.Add(15 * time.Second)},
		{kind: "sink-down", from: t0.Add(60 * time.Second), to: t0.Add(70 * time.Second)},
	}
	peer := ` [ERROR] allot.raft: failed to heartbeat to: peer=127.0.0.1:19223 backoff time=10ms error="dial tcp 127.0.0.1:19223: connect: connection refused"`
	at := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }
	snapshot := ` [ERROR] allot.raft: failed to take snapshot: error="nothing new to snapshot"`
	catchingUp := ` [ERROR] allot.raft: failed to take snapshot: error="cannot take snapshot now, wait until the configuration entry at 227 has been applied (have applied 128)"`
	log := strings.Join([]string{
		at(12*time.Second) + peer,       // in the kill: explained
		at(25*time.Second) + peer,       // in its grace: explained
		at(16*time.Second) + snapshot,   // the killed member back from its snapshot: explained
		at(17*time.Second) + catchingUp, // a member catching up, its snapshot timer early: explained
		at(5*time.Second) + peer,        // before it
		at(65*time.Second) + peer,       // a sink fault stops no member
		at(66*time.Second) + snapshot,   // nor brings one back
		at(67*time.Second) + catchingUp,
		at(12*time.Second) + ` [ERROR] allot.gw-1: the rule's algorithm refused a limit; the old one is still enforced and reported`,
	}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "c1.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if h.checkLogs([]string{path}) {
		t.Fatal("checkLogs passed logs with unexplained ERROR lines")
	}
	got := out.String()
	if n := strings.Count(got, "unexpected ERROR:"); n != 5 {
		t.Errorf("%d unexpected ERROR lines reported, want 5:\n%s", n, got)
	}
	for _, want := range []string{at(5 * time.Second), at(65 * time.Second), at(66 * time.Second), at(67 * time.Second), "refused a limit"} {
		if !strings.Contains(got, want) {
			t.Errorf("not reported: %s\n%s", want, got)
		}
	}
}
