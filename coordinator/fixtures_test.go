package coordinator

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"testing"
)

// The files in testdata/fsm-v1 were written by the version before the
// state machine moved to its own package: log.bin is the Raft log data of
// every command type (each entry a uvarint length and the entry's bytes,
// ending with an ignorable command of a type no version knows),
// snapshot.snap the format 1 snapshot of the state they build, and
// state.txt that state. Existing clusters' logs and snapshots look like
// these: every later version must read them to the same state.

// fixtureDump renders a state as testdata/fsm-v1/state.txt holds it.
func fixtureDump(s *state) string {
	var names []string
	for _, r := range s.rules.Rules() {
		names = append(names, r.Name)
	}
	return fmt.Sprintf("epoch %d window %d interval %d ttl %d grants %d/%d cluster %s rules v%d %v\n",
		s.epoch, s.billingWindow, s.reportInterval, s.leaseTTL, s.grantEpoch, s.grantSeq, s.clusterID, s.rules.Version(), names) +
		stateWithoutHeader(dumpState(s))
}

// readFixtureLog splits testdata/fsm-v1/log.bin into entries.
func readFixtureLog(t *testing.T) [][]byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/fsm-v1/log.bin")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	r := bufio.NewReader(bytes.NewReader(raw))
	for {
		n, err := binary.ReadUvarint(r)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("log.bin entry %d: %v", len(out)+1, err)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			t.Fatalf("log.bin entry %d: %v", len(out)+1, err)
		}
		out = append(out, data)
	}
}

// TestReadsPreviousVersionsLogAndSnapshot: the log entries and the
// snapshot the previous version wrote decode, pass the start-up check and
// build the state that version built.
func TestReadsPreviousVersionsLogAndSnapshot(t *testing.T) {
	want, err := os.ReadFile("testdata/fsm-v1/state.txt")
	if err != nil {
		t.Fatal(err)
	}
	f := testFSM()
	for i, data := range readFixtureLog(t) {
		l := rawEntry(uint64(i+1), data)
		if err := checkEntry(l); err != nil {
			t.Fatalf("entry %d: %v", i+1, err)
		}
		f.Apply(l)
	}
	var got string
	f.read(func(s *state) { got = fixtureDump(s) })
	if got != string(want) {
		t.Errorf("the log applied to:\n%s\n--- want\n%s", got, want)
	}
	raw, err := os.ReadFile("testdata/fsm-v1/snapshot.snap")
	if err != nil {
		t.Fatal(err)
	}
	g := testFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(raw))); err != nil {
		t.Fatalf("restoring the previous version's snapshot: %v", err)
	}
	checkIndex(t, g, "after restoring the previous version's snapshot")
	g.read(func(s *state) { got = fixtureDump(s) })
	if got != string(want) {
		t.Errorf("the snapshot restored to:\n%s\n--- want\n%s", got, want)
	}
}
