package coordinator

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/testwait"

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
	if got := next.alloc.LeaseTTL(); got != time.Second {
		t.Errorf("the new leader's allocator uses a %v TTL", got)
	}
	for id, l := range logs {
		if n := l.count(settingsWarning); n != 1 {
			t.Errorf("%s warned %d times; want once", id, n)
		}
	}
}

// TestRestoreFormat1Backup: a backup written before the report interval
// and lease TTL were replicated restores into a cluster, which fixes them
// from its leader's flags (internal/state reads the same file to the
// same state).
func TestRestoreFormat1Backup(t *testing.T) {
	raw, err := os.ReadFile("internal/state/testdata/snapshot-format1.snap")
	if err != nil {
		t.Fatal(err)
	}
	c := cluster(t, 1, nil)[0]
	if _, err := RestoreFrom(context.Background(), allotpb.NewClusterServiceClient(dial(t, c.GRPCAddr())), bytes.NewReader(raw), ""); err != nil {
		t.Fatalf("restoring a format 1 backup into a cluster: %v", err)
	}
	var got allocator.Settings
	var lines int
	c.fsm.Read(func(s *state.State) {
		got, lines = allocator.SettingsOr(s.Settings(), allocator.Settings{}), s.LedgerLen()
	})
	if got != (allocator.Settings{BillingWindow: time.Hour, ReportInterval: c.cfg.ReportInterval, LeaseTTL: c.cfg.LeaseTTL}) || lines == 0 {
		t.Errorf("after restoring: settings %+v, %d ledger lines; want the backup's window and this leader's interval and TTL", got, lines)
	}
}
