package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/allot-io/allot/internal/fleet"
	"github.com/allot-io/allot/internal/pgserver"
	"github.com/allot-io/allot/ledger"
)

// The ledger sink: every coordinator runs with --ledger-sink-file naming
// a PostgreSQL the harness starts in the run's directory
// (internal/pgserver), so the leader exports final ledger lines to it in
// small batches all through the run. The sink phases fail that export
// the ways a database fails it — the leader killed with its transaction
// open, the server stopped, the server frozen — and the end of the run
// counts the units in PostgreSQL, read with SQL, plus those still in the
// coordinators' memory, against what the sidecars answered (sinkcheck.go).

// pgRequireEnv, set to 1 (make test sets it), turns a missing PostgreSQL
// from skipped sink phases into a failed run, as it does for the tests
// of internal/pgserver/pgtest, whose RequireEnv it is.
const pgRequireEnv = "ALLOT_PG_TESTS"

// sinkDatabase is the database the coordinators export to.
const sinkDatabase = "allot"

// sinkConfig is the sink's part of the configuration.
type sinkConfig struct {
	// on runs the coordinators with the sink; required fails the run
	// when PostgreSQL is not installed instead of skipping the sink.
	on, required bool
	// batch and interval are the coordinators' --ledger-export-batch and
	// --ledger-export-interval: small, so that a run has many batches.
	batch    int
	interval time.Duration
	// killMidTx runs sink-kill-mid-tx; down and pause are how long
	// sink-down stops and sink-pause freezes PostgreSQL (0: not at all).
	killMidTx   bool
	down, pause time.Duration
}

func defaultSink() sinkConfig {
	return sinkConfig{on: true, batch: 500, interval: 500 * time.Millisecond, killMidTx: true, down: 30 * time.Second, pause: 20 * time.Second}
}

// sinkCatchUpBatches is how many batches after the last fault count as
// the export having caught up, when the leader's backlog is never seen
// empty.
const sinkCatchUpBatches = 3

// sinkDB is the run's PostgreSQL and what the harness knows of it.
type sinkDB struct {
	srv  *pgserver.Server
	dsn  string
	file string // holds dsn: every coordinator's --ledger-sink-file
}

// startSink starts PostgreSQL in the run's directory, creates the
// coordinators' database and writes its DSN to a file for them. Without
// PostgreSQL installed it returns nil and says the sink is skipped,
// unless the configuration requires it.
func (h *harness) startSink(ctx context.Context) (*sinkDB, error) {
	if err := pgserver.Available(); err != nil {
		if h.cfg.sink.required {
			return nil, fmt.Errorf("the ledger sink needs PostgreSQL (-sink given, or %s=1): %w", pgRequireEnv, err)
		}
		h.log.logf("sink: %v; the sink phases are skipped (-sink=false says so quietly; -sink or %s=1 makes this an error)", err, pgRequireEnv)
		return nil, nil
	}
	dir := filepath.Join(h.dir, "pg")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making PostgreSQL's directory: %w", err)
	}
	start := time.Now()
	// log_lock_waits puts sink-kill-mid-tx's blocked transaction in the
	// server's log too.
	srv, err := pgserver.Start(ctx, pgserver.Options{Dir: dir, Settings: map[string]string{"log_lock_waits": "on"}})
	if err != nil {
		return nil, fmt.Errorf("starting PostgreSQL for the ledger sink: %w", err)
	}
	s := &sinkDB{srv: srv, file: filepath.Join(h.dir, "sink.dsn")}
	if s.dsn, err = srv.CreateDatabase(ctx, sinkDatabase); err != nil {
		srv.Close()
		return nil, err
	}
	if err := os.WriteFile(s.file, []byte(s.dsn+"\n"), 0o600); err != nil {
		srv.Close()
		return nil, fmt.Errorf("writing the sink's DSN: %w", err)
	}
	h.log.logf("sink: PostgreSQL (pid %d) on port %d in %.1fs, database %s; its log is %s", srv.PID(), srv.Port(), time.Since(start).Seconds(), sinkDatabase, srv.LogFile())
	return s, nil
}

// close stops the server by its PID and keeps its directory.
func (s *sinkDB) close() error { return s.srv.Close() }

// connect opens a connection of the harness's own to the sink.
func (s *sinkDB) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		return nil, fmt.Errorf("connecting to the sink: %w", err)
	}
	return conn, nil
}

// position reads cluster's export position: zero before its first batch
// or before the schema exists.
func (s *sinkDB) position(ctx context.Context, cluster string) (ledger.Position, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return ledger.Position{}, err
	}
	defer conn.Close(context.Background())
	return readPosition(ctx, conn, cluster)
}

// readPosition reads cluster's row of allot_export_position with SQL of
// the harness's own, not the sink's code that the check is checking.
func readPosition(ctx context.Context, conn *pgx.Conn, cluster string) (ledger.Position, error) {
	var (
		window               *int64
		tenant, rule, region *string
		lines, batches       int64
	)
	err := conn.QueryRow(ctx, `SELECT extract(epoch FROM window_start)::bigint, tenant, rule, region, lines, batches
FROM allot_export_position WHERE cluster_id = $1`, cluster).Scan(&window, &tenant, &rule, &region, &lines, &batches)
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pe) && pe.Code == "42P01":
		return ledger.Position{}, nil
	case err != nil:
		return ledger.Position{}, fmt.Errorf("reading the export position: %w", err)
	}
	p := ledger.Position{Lines: uint64(lines), Batches: uint64(batches)}
	if window != nil && tenant != nil && rule != nil && region != nil {
		p.Set, p.Last = true, ledger.Key{Window: *window, Tenant: *tenant, Rule: *rule, Region: *region}
	}
	return p, nil
}

// clusterID is the cluster's ID from the leader's status, which its rows
// in the sink carry; the first leader fixes it.
func (h *harness) clusterID(ctx context.Context) (string, error) {
	var id string
	err := h.cl.Wait(ctx, 60*time.Second, "the cluster's ID", func(ctx context.Context) (bool, string, error) {
		leader, st := h.cl.Leader(ctx)
		if leader == nil {
			return false, "no member leads", nil
		}
		id = st.ClusterID
		return id != "", leader.ID + " has no cluster ID yet", nil
	})
	return id, err
}

// sinkPhases runs the sink phases the configuration asks for, and
// restart-member, which runs with or without the sink. The two that
// judge the limiter unaffected by the sink's absence come first, after
// the pauses' gap, each followed by a third of -kill-gap of traffic; the
// two that kill a member last, each followed by the whole of it, so that
// the members have forwarded what their RLQS streams held before the
// next kill.
func (h *harness) sinkPhases(ctx context.Context, cl *client, after func(name string, d time.Duration) error) error {
	cfg := &h.cfg
	on := h.sink != nil
	type step struct {
		name string
		run  func(context.Context) error
		gap  time.Duration
	}
	var steps []step
	if on && cfg.sink.down > 0 {
		steps = append(steps, step{"sink-down", func(ctx context.Context) error { return h.sinkDown(ctx, cl) }, cfg.killGap / 3})
	}
	if on && cfg.sink.pause > 0 {
		steps = append(steps, step{"sink-pause", func(ctx context.Context) error { return h.sinkPause(ctx, cl) }, cfg.killGap / 3})
	}
	if on && cfg.sink.killMidTx {
		steps = append(steps, step{"sink-kill-mid-tx", h.killMidTx, cfg.killGap})
	}
	if cfg.restartMember {
		steps = append(steps, step{"restart-member", func(ctx context.Context) error {
			_, err := h.cl.KillFollower(ctx, cfg.killDown)
			return err
		}, cfg.killGap})
	}
	for i, p := range steps {
		h.log.logf("phase: %s", p.name)
		end := h.fault(p.name)
		err := p.run(ctx)
		end()
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		gap := p.gap
		if i == len(steps)-1 {
			gap = cfg.killGap
		}
		if err := after("traffic after "+p.name, gap); err != nil {
			return err
		}
	}
	return nil
}

// problem records a sink phase's failed expectation: the run goes on,
// and fails at the end.
func (h *harness) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.sinkProblems = append(h.sinkProblems, msg)
	h.log.logf("FAIL: %s", msg)
}

// exportTry bounds how long sinkDown keeps PostgreSQL down past -sink-down
// for the export to try lines that became final at its end: its rounds
// come every --ledger-export-interval (-sink-interval, under a second
// here; 5 s by default).
const exportTry = 10 * time.Second

// sinkDown stops PostgreSQL (a fast shutdown) under load for -sink-down:
// the coordinators must answer every report as before, the load see no
// error, and the export, if lines waited for it meanwhile, count its
// failures as unreachable. Then the server starts again on the same port
// and data.
//
// The leader touches the database only when it has lines it may write
// (it remembers the position it wrote last), so unless some wait already,
// the stop begins a second before a billing window ends: the window's
// lines become final, and wait for the export, while the database is
// down — unless an older window is still open, which the export may not
// pass.
func (h *harness) sinkDown(ctx context.Context, cl *client) error {
	d := h.cfg.sink.down
	bw := h.cfg.billingWindow
	end := time.Now().Truncate(bw).Add(bw)
	if ready, detail, err := h.exportable(ctx); err == nil && ready > 0 {
		h.log.logf("sink-down: the export has lines to write already (%s)", detail)
	} else if wait := time.Until(end) - time.Second; wait > 0 {
		h.log.logf("sink-down: waiting %.1fs, until a second before the billing window ends at %s, so that its lines become final while PostgreSQL is down",
			wait.Seconds(), end.UTC().Format("15:04:05"))
		if err := fleet.Sleep(ctx, wait); err != nil {
			return err
		}
	}
	before := h.watch(ctx, cl)
	h.log.logf("sink-down: stopping PostgreSQL (fast shutdown) for %v under load", d)
	if err := h.sink.srv.Stop(); err != nil {
		return err
	}
	gaps, err := h.answeredGaps(ctx, d)
	if err != nil {
		return err
	}
	during := h.watch(ctx, cl).since(before)
	ready, detail, rerr := h.exportable(ctx)
	// Lines that became final late, at the end of the stop (on a loaded
	// machine a window is final some seconds after it ends), may not have
	// met the export yet: the metrics were read before the lines were
	// final. PostgreSQL stays down until the export has tried them, within
	// exportTry: a CI run read "11450 final lines, no error" 0.7 s before
	// the leader logged its unreachable attempt.
	for deadline := time.Now().Add(exportTry); rerr == nil && ready > 0 && during.exportErrs["unreachable"] <= 0 && time.Now().Before(deadline); {
		if err := fleet.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
		during = h.watch(ctx, cl).since(before)
	}
	start := time.Now()
	if err := h.sink.srv.Restart(ctx); err != nil {
		return fmt.Errorf("restarting PostgreSQL: %w", err)
	}
	h.log.logf("sink-down: PostgreSQL restarted (pid %d) in %.1fs; while it was down: %s; longest without an answered report %s",
		h.sink.srv.PID(), time.Since(start).Seconds(), during, gapList(gaps))
	h.judgeUnaffected("sink-down", cl, d, during, gaps)
	switch {
	case rerr != nil:
		h.log.logf("sink-down: what the export could write at the end is unknown (%v); export errors %s", rerr, causes(during.exportErrs))
	case ready == 0:
		h.log.logf("sink-down: at the end the export had nothing it could write (%s), and no error to count", detail)
	case during.exportErrs["unreachable"] <= 0:
		h.problem("sink-down: the export had lines to write (%s), and counted no error with cause unreachable while PostgreSQL was down (allot_coordinator_ledger_export_errors_total: %s)",
			detail, causes(during.exportErrs))
	default:
		h.log.logf("sink-down: the export had lines to write (%s), and counted %.0f errors with cause unreachable",
			detail, during.exportErrs["unreachable"])
	}
	return nil
}

// exportable counts the final lines the export may write next: those the
// leader holds in memory, after the position its state has
// (/v1/status: ledger.exported_through_window), in windows older than
// every open one. It reads the leader's QueryUsage from the window after
// the position's, which it answers from memory alone, PostgreSQL up or
// not. The lines of the position's own window after it are not counted.
func (h *harness) exportable(ctx context.Context) (int, string, error) {
	leader, st := h.cl.Leader(ctx)
	if leader == nil {
		return 0, "", errors.New("no leader")
	}
	from := time.Now().Add(-48 * time.Hour)
	if w := st.Ledger.ExportedThroughWindow; w != "" {
		t, err := time.Parse(time.RFC3339, w)
		if err != nil {
			return 0, "", fmt.Errorf("%s's exported_through_window %q: %w", leader.ID, w, err)
		}
		from = t.Add(h.cfg.billingWindow)
	}
	recs, err := h.queryUsageOf(ctx, leader, from)
	if err != nil {
		return 0, "", fmt.Errorf("QueryUsage of %s from %s: %w", leader.ID, from.UTC().Format(time.RFC3339), err)
	}
	open, hasOpen := int64(0), false
	for _, r := range recs {
		if w := r.GetWindowStart().GetSeconds(); !r.GetFinal() && (!hasOpen || w < open) {
			open, hasOpen = w, true
		}
	}
	ready, behind := 0, 0
	for _, r := range recs {
		switch {
		case !r.GetFinal() || r.GetExported():
		case !hasOpen || r.GetWindowStart().GetSeconds() < open:
			ready++
		default:
			behind++
		}
	}
	detail := fmt.Sprintf("leader %s: %d final lines it may write", leader.ID, ready)
	if hasOpen {
		detail += fmt.Sprintf(", %d behind the window of %s, not final", behind, time.Unix(open, 0).UTC().Format("15:04:05"))
	}
	return ready, detail, nil
}

// sinkPause freezes PostgreSQL (SIGSTOP to the postmaster and every
// backend) under load for -sink-pause, then thaws it: connections stay
// open and nothing answers, as with a hung host.
func (h *harness) sinkPause(ctx context.Context, cl *client) error {
	d := h.cfg.sink.pause
	before := h.watch(ctx, cl)
	h.log.logf("sink-pause: SIGSTOP PostgreSQL (the postmaster and every backend) for %v under load", d)
	if err := h.sink.srv.Pause(); err != nil {
		return err
	}
	gaps, serr := h.answeredGaps(ctx, d)
	if err := h.sink.srv.Resume(); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	during := h.watch(ctx, cl).since(before)
	h.log.logf("sink-pause: SIGCONT PostgreSQL; while it was stopped: %s; longest without an answered report %s", during, gapList(gaps))
	h.judgeUnaffected("sink-pause", cl, d, during, gaps)
	return nil
}

// judgeUnaffected checks that a sink fault of length d left the limiter
// alone: no check failed, and no sidecar went three quarters of the
// fault (2 s at least) without an answered report: a report path that
// waited on the database would answer none until it came back. On a loaded machine some
// reports fail at any time — each attempt has a quarter of a report
// interval — and a sidecar may put a rule on its fail mode for a moment:
// those are logged with the phase, not judged.
func (h *harness) judgeUnaffected(phase string, cl *client, d time.Duration, w faultWatch, gaps []time.Duration) {
	if w.loadErrors != 0 {
		h.problem("%s: %d checks failed (transport errors or unexpected statuses) while the sink was away; the run's first: %s",
			phase, w.loadErrors, strings.Join(cl.errorNotes(), "; "))
	}
	bound := max(d*3/4, 2*time.Second)
	for i, g := range gaps {
		if g >= bound {
			r := w.reports[i]
			h.problem("%s: sidecar %s had no report answered for %.1fs of the %v the sink was away (%.0f answered, %.0f failed in all): want less than %v",
				phase, h.cl.Sidecars[i].ID, g.Seconds(), d, r[0], r[1], bound)
		}
	}
}
