package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"google.golang.org/protobuf/proto"
)

// TestFSMUnknownCommands: an ignorable unknown command is skipped; any
// other unknown or undecodable entry stops the node rather than letting it
// diverge, and the start-up check refuses the same entries.
func TestFSMUnknownCommands(t *testing.T) {
	f := testFSM()
	skip := rawEntry(1, []byte{byte(state.Ignorable | 0x7f), 1, 2})
	if got := f.Apply(skip); got != nil {
		t.Errorf("ignorable unknown command returned %v", got)
	}
	if err := CheckEntry(skip); err != nil {
		t.Errorf("the start-up check refused an ignorable unknown command: %v", err)
	}
	for _, tc := range []struct {
		data []byte
		want string
	}{
		{[]byte{0x7f}, "unknown command type 127"},
		{[]byte{byte(state.CmdReports), 0xff, 0xff, 0xff}, "a reports command that does not decode"},
		{[]byte{}, "an empty command"},
	} {
		if err := CheckEntry(rawEntry(2, tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("entry %x: the start-up check said %v; want %q", tc.data, err, tc.want)
		}
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "coordinator: log entry 2") {
					t.Errorf("entry %x: recovered %v, want a stop", tc.data, r)
				}
			}()
			f.Apply(rawEntry(2, tc.data))
		}()
	}
}

// The files in testdata/v1 were written by the version before the state
// machine moved to its own package: log.bin is the Raft log data of every
// command type (each entry a uvarint length and the entry's bytes, ending
// with an ignorable command of a type no version knows), snapshot.snap
// the format 1 snapshot of the state they build, and state.txt that
// state. Existing clusters' logs and snapshots look like these: every
// later version must read them to the same state.

// readFixtureLog splits testdata/v1/log.bin into entries.
func readFixtureLog(t *testing.T) [][]byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/v1/log.bin")
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
	want, err := os.ReadFile("testdata/v1/state.txt")
	if err != nil {
		t.Fatal(err)
	}
	f := testFSM()
	for i, data := range readFixtureLog(t) {
		l := rawEntry(uint64(i+1), data)
		if err := CheckEntry(l); err != nil {
			t.Fatalf("entry %d: %v", i+1, err)
		}
		f.Apply(l)
		// The schema is unchanged: what decodes encodes to the same bytes.
		if m, ok := state.Message(state.Command(data[0])); ok {
			if err := proto.Unmarshal(data[1:], m); err != nil {
				t.Fatal(err)
			}
			again, err := state.Encode(state.Command(data[0]), m)
			if err != nil || !bytes.Equal(again, data) {
				t.Errorf("entry %d (%v) encodes to %x, was %x (%v)", i+1, state.Command(data[0]), again, data, err)
			}
		}
	}
	var got string
	f.Read(func(s *state.State) { got = dump(s) })
	if got != string(want) {
		t.Errorf("the log applied to:\n%s\n--- want\n%s", got, want)
	}
	raw, err := os.ReadFile("testdata/v1/snapshot.snap")
	if err != nil {
		t.Fatal(err)
	}
	g := testFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(raw))); err != nil {
		t.Fatalf("restoring the previous version's snapshot: %v", err)
	}
	g.Read(func(s *state.State) { got = dump(s) })
	if got != string(want) {
		t.Errorf("the snapshot restored to:\n%s\n--- want\n%s", got, want)
	}
	// What this version writes of it reads back to the same state.
	h := testFSM()
	if err := h.Restore(io.NopCloser(bytes.NewReader(persist(t, g)))); err != nil {
		t.Fatalf("restoring a snapshot of the restored state: %v", err)
	}
	h.Read(func(s *state.State) { got = dump(s) })
	if got != string(want) {
		t.Errorf("a snapshot of the restored state restored to:\n%s\n--- want\n%s", got, want)
	}
}

// TestViewPerEntry: every reader between two entries shares one view,
// made by the first; the next entry applied gives the next reader a new
// one, which shows it.
func TestViewPerEntry(t *testing.T) {
	f := testFSM()
	f.Apply(entry(t, 1, state.CmdEpoch, &fsmpb.EpochCommand{Leader: "n1"}))
	v := f.View()
	if f.View() != v {
		t.Fatal("two readers between the same entries got two views")
	}
	f.Apply(entry(t, 2, state.CmdEpoch, &fsmpb.EpochCommand{Leader: "n2"}))
	w := f.View()
	if w == v || w.Epoch() != 2 || v.Epoch() != 1 {
		t.Fatalf("after an entry: the view is new %v, at epoch %d; the old one at %d", w != v, w.Epoch(), v.Epoch())
	}
}
