package ledgersink_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/internal/pgserver/pgtest"
	"github.com/allot-io/allot/ledger"
)

func TestCauseLabels(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("ledgersink: writing: %w", &pgconn.PgError{Code: code}) }
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{pg("08006"), "unreachable"},
		{pg("57P01"), "unreachable"},
		{pg("57P03"), "unreachable"},
		{pg("28P01"), "auth"},
		{pg("28000"), "auth"},
		{pg("25006"), "read_only"},
		{pg("53100"), "disk_full"},
		{pg("42P01"), "schema"},
		{pg("42703"), "schema"},
		{pg("3D000"), "schema"},
		{pg("3F000"), "schema"},
		{pg("57014"), "timeout"},
		{pg("23505"), "other"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("x: %w", context.Canceled), "canceled"},
		{fmt.Errorf("x: %w", io.ErrUnexpectedEOF), "unreachable"},
		{&ledgersink.PositionError{}, "position"},
		{fmt.Errorf("x: %w", ledgersink.ErrSchemaTooNew), "schema"},
		{fmt.Errorf("x: %w", ledgersink.ErrBadBatch), "other"},
		{errors.New("something"), "other"},
	}
	for _, tt := range tests {
		if got := ledgersink.Cause(tt.err); got != tt.want {
			t.Errorf("Cause(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestCauseFromARealServer makes each failure happen and checks what
// Write says of it.
func TestCauseFromARealServer(t *testing.T) {
	shared := pgtest.Shared(t)
	tests := []struct {
		name string
		// dsn returns the database to open, after breaking it.
		dsn  func(t *testing.T) string
		want string
	}{
		{"a role that does not exist", func(t *testing.T) string {
			return fmt.Sprintf("postgres://nosuchrole@127.0.0.1:%d/postgres?sslmode=disable", shared.Port())
		}, "auth"},
		{"a database that does not exist", func(t *testing.T) string {
			return shared.DSN("nosuchdatabase")
		}, "schema"},
		{"a read-only database", func(t *testing.T) string {
			_, dsn := migrated(t)
			exec(t, dsn, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$`)
			return dsn
		}, "read_only"},
		{"a dropped table", func(t *testing.T) string {
			_, dsn := migrated(t)
			exec(t, dsn, "DROP TABLE allot_usage")
			return dsn
		}, "schema"},
		{"nothing listening", func(t *testing.T) string {
			return "postgres://allot@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5"
		}, "unreachable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t, tt.dsn(t))
			_, err := s.Write(ctxFor(t, 30*time.Second), "eu-1", ledger.Position{}, batch(hour(0), 3))
			if got := ledgersink.Cause(err); got != tt.want {
				t.Errorf("Write = %v: Cause %q, want %q", err, got, tt.want)
			}
		})
	}
}

func exec(t *testing.T, dsn, sql string) {
	t.Helper()
	if _, err := connect(t, dsn).Exec(ctxFor(t, 30*time.Second), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestCauseOfAStoppedAndAPausedServer freezes a server (SIGSTOP) under a
// short deadline, then shuts it down.
func TestCauseOfAStoppedAndAPausedServer(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := pgtest.CreateDatabase(t, srv)
	warm := open(t, dsn) // holds a connection from before the pause
	if err := warm.Migrate(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		name string
		sink *ledgersink.Sink
	}{{"a pooled connection", warm}, {"a new connection", open(t, dsn)}} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := s.sink.Write(ctx, "eu-1", ledger.Position{}, batch(hour(0), 3))
		cancel()
		if got := ledgersink.Cause(err); got != "timeout" {
			t.Errorf("paused, %s: Write = %v: Cause %q, want timeout", s.name, err, got)
		}
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		name string
		sink *ledgersink.Sink
	}{{"a pooled connection", warm}, {"a new connection", open(t, dsn)}} {
		_, err := s.sink.Write(ctxFor(t, 30*time.Second), "eu-1", ledger.Position{}, batch(hour(0), 3))
		if got := ledgersink.Cause(err); got != "unreachable" {
			t.Errorf("stopped, %s: Write = %v: Cause %q, want unreachable", s.name, err, got)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := warm.Ping(ctx); ledgersink.Cause(err) != "canceled" {
		t.Errorf("Ping with a cancelled context = %v: Cause %q, want canceled", err, ledgersink.Cause(err))
	}
}

// TestOpenWhileDownThenRestart opens the sink while the server is down,
// fails a batch, and writes it once the server is back: once.
func TestOpenWhileDownThenRestart(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := pgtest.CreateDatabase(t, srv)
	if err := open(t, dsn).Migrate(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	s := open(t, dsn)
	lines := batch(hour(0), 100)
	if _, err := s.Write(ctxFor(t, 30*time.Second), "eu-1", ledger.Position{}, lines); ledgersink.Cause(err) != "unreachable" {
		t.Fatalf("Write while down = %v: Cause %q, want unreachable", err, ledgersink.Cause(err))
	}
	if err := s.Ping(ctxFor(t, 30*time.Second)); ledgersink.Cause(err) != "unreachable" {
		t.Errorf("Ping while down = %v, want unreachable", err)
	}
	if err := srv.Restart(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	pos, err := s.Write(ctxFor(t, 30*time.Second), "eu-1", ledger.Position{}, lines)
	if err != nil {
		t.Fatalf("Write after Restart: %v", err)
	}
	if pos.Lines != 100 || pos.Batches != 1 {
		t.Errorf("position %+v, want 100 lines in 1 batch", pos)
	}
	if got := sumUsage(t, dsn); got != (totals{Rows: 100, Admitted: 100}) {
		t.Errorf("allot_usage holds %+v, want 100 rows admitting 100", got)
	}
	// The same batch once more, as a retry that did not know the first
	// went through: refused, nothing doubled.
	if _, err := s.Write(ctxFor(t, 30*time.Second), "eu-1", ledger.Position{}, lines); !errors.Is(err, ledgersink.ErrPositionMoved) {
		t.Errorf("a second Write of the batch = %v, want ErrPositionMoved", err)
	}
	if got := sumUsage(t, dsn); got != (totals{Rows: 100, Admitted: 100}) {
		t.Errorf("allot_usage holds %+v after the retry, want 100 rows admitting 100", got)
	}
}

func TestOpenRefusesABadDSN(t *testing.T) {
	for _, dsn := range []string{
		"postgres://allot:s3cret@127.0.0.1:notaport/db",
		"postgres://allot:s3cret@127.0.0.1:5432/db?sslmode=bogus",
		"postgres://allot:s3cr%65t@[::1/db",
		"host=127.0.0.1 port=abc password=s3cret",
		"host=127.0.0.1 password='s3cret' sslmode=bogus",
		"postgres://127.0.0.1/db?password=s3cret&port=x",
		"postgres://allot:s3cret@127.0.0.1:5432/db?connect_timeout=soon",
	} {
		_, err := ledgersink.Open(context.Background(), dsn, nil)
		if !errors.Is(err, ledgersink.ErrBadDSN) {
			t.Errorf("Open(%q) = %v, want ErrBadDSN", dsn, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) = %v: the error shows the password", dsn, err)
		}
	}
}
