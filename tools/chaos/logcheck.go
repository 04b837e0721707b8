package main

import (
	"regexp"
	"time"

	"github.com/allot-io/allot/internal/fleet"
)

// A healthy process logs no ERROR its circumstances do not explain: a
// lease the algorithm refuses, on a cluster that is merely busy, is a
// defect no other check of the run sees. So every ERROR line of every
// process must fall in a fault the harness made and be of a kind that
// fault causes; any other fails the run.

// faultGrace is how long after a fault ends its errors are still
// expected: reconnections back off for seconds, and a restarted member
// catches up before its peers stop failing to reach it.
const faultGrace = 15 * time.Second

// raftPeerDown is what Raft logs at ERROR while a peer it talks to is
// down or stopped: the peer's connections end mid-command, votes,
// appends, heartbeats and snapshots to it fail, a stale peer's term is
// newer.
var raftPeerDown = regexp.MustCompile(`\[ERROR\] +allot\.raft: (failed to (decode incoming command|make requestVote RPC|appendEntries to|heartbeat to|pipeline appendEntries|start pipeline replication to|send snapshot to|flush response)|peer has newer term, stopping replication)`)

// raftRejoined is what Raft logs at ERROR when a member comes back: one
// whose log was lost or replaced (a lost or damaged disk, a fresh member
// added to a recovered one) is first asked for from index 1, which the
// leader has compacted into a snapshot, and is sent the snapshot instead;
// and a member restarted from its snapshot may find, when its snapshot
// timer fires, nothing applied since; a member catching up with its log
// lost may find, when it fires, the entries it was sent past the snapshot
// threshold but the configuration entry among them not applied yet, and
// Raft waits for the next timer (seen once in make test: a lost disk).
var raftRejoined = regexp.MustCompile(`allot\.raft: (failed to get log: index=1 error="log not found"|failed to take snapshot: error="(nothing new to snapshot|cannot take snapshot now, wait until the configuration entry at [0-9]+ has been applied \(have applied [0-9]+\))")`)

// faultErrors are, by kind of fault, the ERROR lines it may cause. The
// faults that stop a member (a SIGKILL or SIGSTOP, the whole cluster
// down, a member's disk damaged or lost) cause Raft's; the storage
// faults, what Raft says of the damage itself; the others, none: a sink
// stopped or frozen, hostile input, forged reports and a flood of
// tenants are met with WARN at most.
//
// Every fault that brings a member back (from its snapshot, or with its
// log lost or replaced) causes raftRejoined's: `make chaos` failed on them
// after its leader kills, damaged stores and lost disk, though the ledger
// and the sink were exact.
var faultErrors = map[string][]*regexp.Regexp{
	"leader-kill":      {raftPeerDown, raftRejoined},
	"leader-pause":     {raftPeerDown},
	"outage":           {raftPeerDown, raftRejoined},
	"restart-member":   {raftPeerDown, raftRejoined},
	"sink-kill-mid-tx": {raftPeerDown, raftRejoined}, // the exporting leader is SIGKILLed
	"damaged-store":    {raftPeerDown, raftRejoined},
	"damaged-snapshot": {raftPeerDown, raftRejoined, regexp.MustCompile(`allot\.raft: (CRC checksum failed|failed to open snapshot: .*CRC mismatch)`)},
	"lost-disk":        {raftPeerDown, raftRejoined},
	"shutdown":         {raftPeerDown},
	"disk-full":        {raftPeerDown, raftRejoined, regexp.MustCompile(`allot\.raft: failed to .*no space left on device`)},
	// The recovered member's log starts after a snapshot: the fresh
	// members it adds are sent the snapshot, not index 1; and a snapshot
	// it is due may find nothing applied since the one recovery wrote.
	"lost-quorum": {raftPeerDown, raftRejoined},
}

// faultSpan is one fault the harness made: from when it began until it
// ended (zero while it lasts).
type faultSpan struct {
	kind     string
	from, to time.Time
}

// fault records that a fault of kind begins now; the function it returns
// records its end.
func (h *harness) fault(kind string) (end func()) {
	h.faultMu.Lock()
	defer h.faultMu.Unlock()
	h.faultSpans = append(h.faultSpans, faultSpan{kind: kind, from: time.Now()})
	i := len(h.faultSpans) - 1
	return func() {
		h.faultMu.Lock()
		defer h.faultMu.Unlock()
		h.faultSpans[i].to = time.Now()
	}
}

// expectedErrors are the ERROR lines the faults made explain.
func (h *harness) expectedErrors() []fleet.Expected {
	h.faultMu.Lock()
	defer h.faultMu.Unlock()
	var out []fleet.Expected
	for _, f := range h.faultSpans {
		to := f.to
		if to.IsZero() {
			to = time.Now()
		}
		for _, p := range faultErrors[f.kind] {
			out = append(out, fleet.Expected{Pattern: p, Why: f.kind, From: f.from.Add(-time.Second), To: to.Add(faultGrace)})
		}
	}
	return out
}

// checkLogs logs every ERROR line in the processes' logs at paths that no
// fault explains, and reports whether there were none.
func (h *harness) checkLogs(paths []string) bool {
	bad, err := fleet.UnexpectedErrors(paths, h.expectedErrors())
	if err != nil {
		h.log.logf("reading the logs for ERROR lines: %v", err)
		return false
	}
	if len(bad) > 0 {
		h.firstBadLog = clip(bad[0].String(), 300)
	}
	for i, e := range bad {
		if i == 20 {
			h.log.logf("… and %d more unexpected ERROR lines", len(bad)-i)
			break
		}
		h.log.logf("unexpected ERROR: %s", clip(e.String(), 400))
	}
	h.faultMu.Lock()
	for _, f := range h.faultSpans {
		h.log.logf("fault %s from %s to %s", f.kind, f.from.Format("15:04:05.000"), f.to.Format("15:04:05.000"))
	}
	h.faultMu.Unlock()
	return len(bad) == 0
}
