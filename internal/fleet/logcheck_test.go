package fleet

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestUnexpectedErrors: ERROR lines, in hclog's text and JSON forms, are
// found in every log but those an expectation explains, within its time
// window when it has one; other levels and missing logs are ignored.
func TestUnexpectedErrors(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	os.WriteFile(a, []byte(`2026-12-07T04:10:09.024Z [INFO]  allot.raft: entering follower state
2026-12-07T04:10:09.024Z [ERROR] allot.raft: failed to appendEntries to: peer="{Voter c3 127.0.0.1:29608}" error="connection refused"
2026-12-07T04:10:09.025Z [ERROR] allot.raft: failed to decode incoming command: error="read: connection reset by peer"
2026-12-07T04:12:00.000Z [ERROR] allot.raft: failed to decode incoming command: error="read: connection reset by peer"
`), 0o600)
	os.WriteFile(b, []byte(`{"@level":"error","@message":"the rule's algorithm refused a limit","@timestamp":"2026-12-07T04:10:09.000Z"}
2026-12-07T04:10:10.000Z [WARN]  allot.gw-1: reporting failed
`), 0o600)
	expected := []Expected{
		{Pattern: regexp.MustCompile(regexp.QuoteMeta("127.0.0.1:29608")), Why: "c3 was killed"},
		{Pattern: regexp.MustCompile("connection reset by peer"), Why: "c3's connections ended",
			From: time.Date(2026, 12, 7, 4, 10, 8, 0, time.UTC), To: time.Date(2026, 12, 7, 4, 10, 15, 0, time.UTC)},
	}
	got, err := UnexpectedErrors([]string{a, b, filepath.Join(dir, "missing.log")}, expected)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Log != a || got[0].Line[:24] != "2026-12-07T04:12:00.000Z" || got[1].Log != b {
		t.Fatalf("unexpected errors: %q", got)
	}
}
