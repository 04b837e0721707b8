package ledgersink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/internal/pgserver/pgtest"
	"github.com/allot-io/allot/ledger"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// ctxFor is a context for one step of a test, cancelled when it ends.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// open opens a sink on dsn, closed when t ends.
func open(t testing.TB, dsn string) *ledgersink.Sink {
	t.Helper()
	s, err := ledgersink.Open(ctxFor(t, 10*time.Second), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// migrated is a sink on a fresh, migrated database of the shared server,
// with that database's DSN.
func migrated(t testing.TB) (*ledgersink.Sink, string) {
	t.Helper()
	dsn := pgtest.Database(t)
	s := open(t, dsn)
	if err := s.Migrate(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	return s, dsn
}

// connect is a plain connection for a test to look behind the sink.
func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctxFor(t, 10*time.Second), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// scalar runs a one-value query.
func scalar[T any](t testing.TB, conn *pgx.Conn, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := conn.QueryRow(ctxFor(t, 30*time.Second), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// hour is a window start: hour n of 2026.
func hour(n int) int64 { return time.Date(2026, 1, 1, n, 0, 0, 0, time.UTC).Unix() }

// line is a one-hour line with admitted a.
func line(window int64, tenant, rule, region string, a uint64) ledger.Line {
	return ledger.Line{
		Key:           ledger.Key{Window: window, Tenant: tenant, Rule: rule, Region: region},
		WindowSeconds: 3600, Admitted: a, Denied: a / 10,
	}
}

// batch is n sorted lines of one window, tenants t-00000…, admitted 1 each.
func batch(window int64, n int) []ledger.Line {
	out := make([]ledger.Line, n)
	for i := range out {
		out[i] = line(window, fmt.Sprintf("t-%05d", i), "api", "eu", 1)
	}
	return out
}

func ptr(f float64) *float64 { return &f }
