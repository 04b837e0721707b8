package coordinator

import (
	"bufio"
	"bytes"
	"context"
	"github.com/allot-io/allot/internal/testwait"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/go-hclog"
)

// logBuffer collects a member's log lines, safely for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

const settingsWarning = "settings differ from the cluster's"

// TestSettingsReplicated: the first leader fixes the report interval,
// lease TTL and billing window from its flags; a member started with
// other flags that becomes leader later keeps the cluster's, in what it
// tells agents and in how it grants, and says once that its flags lost.
func TestSettingsReplicated(t *testing.T) {
	logs := map[string]*logBuffer{}
	nodes := cluster(t, 3, func(c *Config) {
		if c.NodeID == "n1" {
			return // 200 ms interval, 1 s TTL, 1 h window
		}
		c.ReportInterval, c.LeaseTTL, c.BillingWindow = 300*time.Millisecond, 3*time.Second, 2*time.Minute
		logs[c.NodeID] = &logBuffer{}
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: c.NodeID, Level: hclog.Warn, Output: logs[c.NodeID]})
	})
	first := waitLeader(t, nodes)
	if first.ID() != "n1" {
		t.Fatalf("%s leads; the test expects the bootstrapping member", first.ID())
	}
	for id, l := range logs {
		testwait.For(t, 10*time.Second, id+" to warn that the cluster's settings win", func() bool { return l.count(settingsWarning) > 0 })
	}
	stop(first)
	next := waitLeader(t, nodes[1:])
	a := newAgentSim(t, "gw-1", []string{next.GRPCAddr()})
	resp, err := a.report(context.Background(), "acme", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(resp.GetReportIntervalNano()); got != 200*time.Millisecond {
		t.Errorf("new leader %s tells agents to report every %v; the cluster's interval is 200ms", next.ID(), got)
	}
	if got := time.Duration(resp.GetLeaseTtlNano()); got != time.Second {
		t.Errorf("new leader %s grants leases for %v; the cluster's TTL is 1s", next.ID(), got)
	}
	if got := time.Duration(resp.GetBillingWindowNano()); got != time.Hour {
		t.Errorf("billing window %v; the cluster's is 1h", got)
	}
	if got := next.alloc.leaseTTL(); got != time.Second {
		t.Errorf("the new leader's allocator uses a %v TTL", got)
	}
	for id, l := range logs {
		if n := l.count(settingsWarning); n != 1 {
			t.Errorf("%s warned %d times; want once", id, n)
		}
	}
}

// TestRestoreFormat1Snapshot: a snapshot written before the report
// interval and lease TTL were replicated (testdata, written by that
// version) still restores, to the same ledger, incarnations and windows,
// with those two settings left for the next leader to fix; a cluster
// restored from it as a backup fixes them from its leader's flags.
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
	f.read(func(s *state) {
		if s.epoch != 1 || s.billingWindow != int64(time.Hour) || s.rules.Len() != 1 {
			t.Errorf("epoch %d, billing window %v, %d rules; want 1, 1h, 1", s.epoch, time.Duration(s.billingWindow), s.rules.Len())
		}
		if s.reportInterval != 0 || s.leaseTTL != 0 || s.settled() {
			t.Errorf("an old snapshot restored with interval %d and TTL %d", s.reportInterval, s.leaseTTL)
		}
		if got := stateWithoutHeader(dumpState(s)); got != string(want) {
			t.Errorf("restored state differs from what was snapshotted:\n%s\n--- want\n%s", got, want)
		}
	})
	// Fixing the settings leaves the billing window, already fixed, alone.
	f.Apply(entry(t, 100, cmdSettings, &allotpb.SettingsCommand{BillingWindowNano: int64(time.Minute), ReportIntervalNano: int64(time.Second), LeaseTtlNano: int64(5 * time.Second)}))
	f.read(func(s *state) {
		if got := s.settingsOr(settings{}); got != (settings{time.Hour, time.Second, 5 * time.Second}) {
			t.Errorf("settings %+v after fixing", got)
		}
	})

	c := cluster(t, 1, nil)[0]
	if _, err := RestoreFrom(context.Background(), allotpb.NewClusterServiceClient(dial(t, c.GRPCAddr())), bytes.NewReader(raw), ""); err != nil {
		t.Fatalf("restoring a format 1 backup into a cluster: %v", err)
	}
	var got settings
	var lines int
	c.fsm.read(func(s *state) { got, lines = s.settingsOr(settings{}), len(s.ledger) })
	if got != (settings{time.Hour, c.cfg.ReportInterval, c.cfg.LeaseTTL}) || lines == 0 {
		t.Errorf("after restoring: settings %+v, %d ledger lines; want the backup's window and this leader's interval and TTL", got, lines)
	}
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
