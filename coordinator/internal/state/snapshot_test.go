package state

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
)

// TestRestoreFormat1Snapshot: a snapshot written before the report
// interval and lease TTL were replicated (testdata, written by that
// version) still restores, to the same ledger, incarnations and windows,
// with those two settings left for the next leader to fix.
func TestRestoreFormat1Snapshot(t *testing.T) {
	raw, err := os.ReadFile("testdata/snapshot-format1.snap")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/snapshot-format1.state")
	if err != nil {
		t.Fatal(err)
	}
	f := testFSM()
	if err := f.Restore(io.NopCloser(bytes.NewReader(raw))); err != nil {
		t.Fatalf("restoring a format 1 snapshot: %v", err)
	}
	checkIndex(t, f, "after restoring a format 1 snapshot")
	f.read(func(s *State) {
		if s.epoch != 1 || s.billingWindow != int64(time.Hour) || s.rules.Len() != 1 {
			t.Errorf("epoch %d, billing window %v, %d rules; want 1, 1h, 1", s.epoch, time.Duration(s.billingWindow), s.rules.Len())
		}
		if s.reportInterval != 0 || s.leaseTTL != 0 || s.Settled() {
			t.Errorf("an old snapshot restored with interval %d and TTL %d", s.reportInterval, s.leaseTTL)
		}
		if got := stateWithoutHeader(dumpState(s)); got != string(want) {
			t.Errorf("restored state differs from what was snapshotted:\n%s\n--- want\n%s", got, want)
		}
	})
	// Fixing the settings leaves the billing window, already fixed, alone.
	f.Apply(entry(t, 100, CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Minute), ReportIntervalNano: int64(time.Second), LeaseTtlNano: int64(5 * time.Second)}))
	f.read(func(s *State) {
		if got := s.Settings(); got != (Settings{time.Hour, time.Second, 5 * time.Second}) {
			t.Errorf("settings %+v after fixing", got)
		}
	})
}

// stateWithoutHeader drops dumpState's first line (epoch, settings and
// rules) and collapses runs of spaces (protobuf's text form varies them
// on purpose), for comparing with testdata.
func stateWithoutHeader(dump string) string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(dump))
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "epoch ") {
			out = append(out, strings.Join(strings.Fields(sc.Text()), " "))
		}
	}
	return strings.Join(out, "\n") + "\n"
}
