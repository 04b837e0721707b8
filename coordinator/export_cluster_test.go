package coordinator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/internal/pgserver/pgtest"
	"github.com/allot-io/allot/internal/testwait"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
)

// sinkConfig makes members export to dsn in small batches of one-second
// windows, so that a test sees many windows final and many batches.
func sinkConfig(dsn string) func(*Config) {
	return func(c *Config) {
		c.LedgerSink = dsn
		c.BillingWindow = time.Second
		c.AgentTimeout = 2 * time.Second
		c.LedgerRetention = time.Hour
		c.ExportBatch = 7
		c.ExportInterval = 50 * time.Millisecond
		c.ExportTimeout = 2 * time.Second
	}
}

// sinkTotal sums what the sink holds of tenant ("": every tenant) for the
// cluster.
func sinkTotal(t *testing.T, dsn, cluster, tenant string) (admitted uint64, lines int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := ledgersink.Open(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q := ledgersink.Query{To: 1 << 40, Tenant: tenant, Limit: 1000}
	for {
		page, more, err := s.Query(ctx, cluster, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page {
			admitted += l.Admitted
			lines++
		}
		if !more || len(page) == 0 {
			return admitted, lines
		}
		q.After = &page[len(page)-1].Key
	}
}

// billTotal sums tenant's ("": every tenant's) admitted units over every page of the bill as
// a billing job reads it through the coordinator.
func billTotal(t *testing.T, c *Coordinator, tenant string) uint64 {
	t.Helper()
	q := &allotpb.UsageQuery{Tenant: tenant, PageSize: 5}
	var sum uint64
	for {
		resp, err := c.queryUsage(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetRecords() {
			sum += r.GetAdmitted()
		}
		if resp.GetNextPageToken() == "" {
			return sum
		}
		q.PageToken = resp.GetNextPageToken()
	}
}

// TestExportToPostgresExactlyOnce: three members export final windows to a
// real PostgreSQL while agents report. The database is stopped under load
// and started again, and the leader is stopped mid-run. Every unit the
// cluster acknowledged ends up exactly once in the database or in the
// state machine, the members drop what was exported, and the bill read
// through the coordinator, from both, is the same total.
func TestExportToPostgresExactlyOnce(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pgtest.CreateDatabase(t, pg)
	nodes := cluster(t, 3, sinkConfig(dsn))
	addrs := []string{nodes[0].GRPCAddr(), nodes[1].GRPCAddr(), nodes[2].GRPCAddr()}
	var agents []*agentSim
	for i := range 3 {
		agents = append(agents, newAgentSim(t, fmt.Sprintf("gw-%d", i+1), addrs))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := uint64(1); ctx.Err() == nil; n++ {
				// A dozen tenants: a window's lines span batches of 7.
				_, _ = a.report(ctx, fmt.Sprintf("tenant-%02d", n%12), n%5+uint64(i), nil)
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	l := waitLeader(t, nodes)
	testwait.For(t, 20*time.Second, "lines to reach the sink", func() bool {
		return counterValue(t, l, "allot_coordinator_ledger_exported_lines_total", "", "") > 0
	})

	// The database goes away under load: the limiter goes on, export
	// waits, and nothing is lost.
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	before := agents[0].ackedTotal()
	testwait.For(t, 20*time.Second, "reports to go on without the database", func() bool { return agents[0].ackedTotal() > before+20 })
	testwait.For(t, 20*time.Second, "export to fail as unreachable", func() bool {
		l := leader(nodes)
		return l != nil && counterValue(t, l, "allot_coordinator_ledger_export_errors_total", "cause", "unreachable") > 0
	})
	restart, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	if err := pg.Restart(restart); err != nil {
		t.Fatal(err)
	}

	// The leader is stopped; the next resumes from the sink's position.
	next, rest := failOver(t, nodes, waitLeader(t, nodes), agents[0], 20)
	cancel()
	wg.Wait()
	want := flushAgents(t, agents)
	var cluster string
	next.fsm.Read(func(s *state.State) { cluster = s.ClusterID() })
	// Once every window is final and exported, the sink holds it all and
	// the members none of it.
	testwait.For(t, 60*time.Second, "every line exported and dropped", func() bool {
		for _, c := range rest {
			n := 0
			c.fsm.Read(func(s *state.State) { n = s.LedgerLen() })
			if n != 0 {
				return false
			}
		}
		got, _ := sinkTotal(t, dsn, cluster, "")
		return got == want
	})
	got, lines := sinkTotal(t, dsn, cluster, "")
	if got != want {
		t.Fatalf("the sink holds %d units, the cluster acknowledged %d", got, want)
	}
	for _, c := range rest {
		if bill := billTotal(t, c, ""); bill != want {
			t.Errorf("%s's bill reads %d units, want %d", c.ID(), bill, want)
		}
	}
	t.Logf("acknowledged %d units; the sink holds exactly that in %d lines", want, lines)
}

// TestBillReadsSinkAndState: while some windows are exported and others
// still in memory, a paged bill covers both, in order, once each. With
// the database away, a page that needs it fails as unavailable, saying
// that the coordinator answered, why the sink could not be read and from
// which window the bill is still in memory; a page from there answers.
// And once lines wait that the sink cannot take, the leader's status
// says the export is failing, why and since when, until it succeeds.
func TestBillReadsSinkAndState(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pgtest.CreateDatabase(t, pg)
	c := cluster(t, 1, sinkConfig(dsn))[0]
	a := newAgentSim(t, "gw-1", []string{c.GRPCAddr()})
	ctx := context.Background()
	for n := uint64(1); n <= 60; n++ {
		if _, err := a.report(ctx, "acme", n, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // spread over several one-second windows
	}
	want := a.ackedTotal()
	testwait.For(t, 30*time.Second, "some windows exported", func() bool {
		var pos ledger.Position
		c.fsm.Read(func(s *state.State) { pos = s.Exported() })
		return pos.Lines >= 2
	})
	if got := billTotal(t, c, "acme"); got != want {
		t.Fatalf("the bill reads %d units, acknowledged %d", got, want)
	}
	if l := c.Status().GetLedger(); l.GetExportError() != "" {
		t.Fatalf("status says the export fails while it succeeds: %v", l)
	}
	stopped := time.Now()
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	// The position the refusal names is the one the query read: one
	// that moved meanwhile (a batch the database committed as it stopped)
	// is read again.
	var (
		pos   ledger.Position
		width int64
		err   error
	)
	testwait.For(t, 10*time.Second, "a query while the export position holds still", func() bool {
		var before ledger.Position
		c.fsm.Read(func(s *state.State) { before = s.Exported() })
		_, err = c.queryUsage(ctx, &allotpb.UsageQuery{Tenant: "acme"})
		c.fsm.Read(func(s *state.State) { pos, width = s.Exported(), s.BillingWindowSeconds() })
		return pos == before
	})
	if err == nil {
		t.Fatal("a bill that needs the stopped database answered")
	}
	t.Logf("with the database stopped: %v", err)
	through := time.Unix(pos.Last.Window, 0).UTC()
	next := through.Add(time.Duration(width) * time.Second)
	st := status.Convert(err)
	info := errorInfo(st)
	if st.Code() != codes.Unavailable || info.GetReason() != allotpb.ReasonLedgerSinkUnavailable || info.GetDomain() != allotpb.ErrorDomain {
		t.Errorf("the refusal is %v, %v; want UNAVAILABLE with reason %s", st.Code(), info, allotpb.ReasonLedgerSinkUnavailable)
	}
	md := info.GetMetadata()
	if md["cause"] != "unreachable" || md["exported_through"] != through.Format(time.RFC3339) || md["in_memory_from"] != next.Format(time.RFC3339) || md["error"] == "" {
		t.Errorf("the refusal's metadata is %v; want cause unreachable, exported through %s, in memory from %s", md, through.Format(time.RFC3339), next.Format(time.RFC3339))
	}
	for _, s := range []string{"the ledger sink is unreachable", "windows from " + next.Format(time.RFC3339) + " on are still in memory", "query from " + next.Format(time.RFC3339)} {
		if !strings.Contains(st.Message(), s) {
			t.Errorf("the refusal %q does not say %q", st.Message(), s)
		}
	}
	if _, err := c.queryUsage(ctx, &allotpb.UsageQuery{Tenant: "acme", From: timestamppb.New(next)}); err != nil {
		t.Errorf("a bill from %s, as the refusal says, needs no database, but: %v", next.Format(time.RFC3339), err)
	}
	resp, err := c.queryUsage(ctx, &allotpb.UsageQuery{Tenant: "acme", PageToken: encodePageToken(pos.Last)})
	if err != nil {
		t.Fatalf("a page after the exported windows needs no database, but: %v", err)
	}
	t.Logf("%d lines still in memory", len(resp.GetRecords()))

	// New lines become final while the database is down: the leader's
	// status says the export fails, why and since when; the status page
	// too.
	for n := uint64(1); n <= 10; n++ {
		if _, err := a.report(ctx, "acme", n, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var failing *allotpb.LedgerStatus
	testwait.For(t, 30*time.Second, "status to say the export fails", func() bool {
		failing = c.Status().GetLedger()
		return failing.GetExportFailures() >= 2
	})
	since, last := failing.GetExportFailingSince().AsTime(), failing.GetExportLastFailure().AsTime()
	if failing.GetExportErrorCause() != "unreachable" || failing.GetExportError() == "" || since.Before(stopped) || !last.After(since) {
		t.Errorf("status says the export fails with cause %q, %q, since %v, last at %v; want unreachable, an error, since after %v (the database stopped), the last later",
			failing.GetExportErrorCause(), failing.GetExportError(), since, last, stopped)
	}
	if x := c.uiState().Export; x == nil || x.Error != failing.GetExportError() || x.Cause != "unreachable" || x.FailingSince == nil || !x.FailingSince.Equal(since) {
		t.Errorf("the status page's export is %+v; want the failure status shows", x)
	}

	// The database is back: the next round succeeds, and status says
	// nothing of the failure.
	restart, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := pg.Restart(restart); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "status to stop saying the export fails", func() bool {
		l := c.Status().GetLedger()
		return l.GetExportError() == "" && l.GetExportFailingSince() == nil && l.GetExportFailures() == 0
	})
	if x := c.uiState().Export; x == nil || x.Error != "" || x.FailingSince != nil {
		t.Errorf("the status page's export is %+v after the export recovered; want no failure", x)
	}
}

// errorInfo is st's google.rpc.ErrorInfo, or nil.
func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

// TestExportKeepsTransactionsInFlight: the leader writes the next batches
// while one waits. With the sink's position row locked by another
// session, ExportParallel export transactions are open at once, the first
// waiting on the lock and the others having copied their lines behind
// it; once the lock is released they commit in order, and every unit
// reaches the sink exactly once.
func TestExportKeepsTransactionsInFlight(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pgtest.CreateDatabase(t, pg)
	c := cluster(t, 1, sinkConfig(dsn))[0]
	agents := []*agentSim{newAgentSim(t, "gw-1", []string{c.GRPCAddr()}), newAgentSim(t, "gw-2", []string{c.GRPCAddr()})}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := uint64(1); ctx.Err() == nil; n++ {
				// 30 tenants: a window's lines make several batches of 7.
				_, _ = a.report(ctx, fmt.Sprintf("tenant-%02d", n%30), n%5+1, nil)
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	testwait.For(t, 20*time.Second, "lines to reach the sink", func() bool {
		return counterValue(t, c, "allot_coordinator_ledger_exported_lines_total", "", "") > 0
	})
	var cluster string
	c.fsm.Read(func(s *state.State) { cluster = s.ClusterID() })

	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(context.Background(), "SELECT 1 FROM allot_export_position WHERE cluster_id = $1 FOR UPDATE", cluster); err != nil {
		t.Fatal(err)
	}
	watch, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	var open, waiting int
	testwait.For(t, 30*time.Second, fmt.Sprintf("%d export transactions open, one waiting on the lock", c.cfg.ExportParallel), func() bool {
		err := watch.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock')
FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend' AND xact_start IS NOT NULL
  AND pid NOT IN (pg_backend_pid(), $1)`, int(conn.PgConn().PID())).Scan(&open, &waiting)
		if err != nil {
			t.Fatal(err)
		}
		return open == c.cfg.ExportParallel && waiting == 1
	})
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	wg.Wait()
	want := flushAgents(t, agents)
	testwait.For(t, 60*time.Second, "every line exported and dropped", func() bool {
		n := 0
		c.fsm.Read(func(s *state.State) { n = s.LedgerLen() })
		got, _ := sinkTotal(t, dsn, cluster, "")
		return n == 0 && got == want
	})
}
