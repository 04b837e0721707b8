// Package pgtest gives tests a real PostgreSQL server (internal/pgserver)
// and never a mock: a test of SQL against anything but PostgreSQL tests
// the mock.
//
// A package whose tests share one server says so in its TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and each test takes a fresh, empty database of it with Database(t). A
// test that stops, kills or pauses its server takes one of its own with
// Start(t). Either way the server is stopped by its PID when the tests
// end, and its directory removed.
//
// Without PostgreSQL installed the tests that need it are skipped,
// saying how to install it; with ALLOT_PG_TESTS=1 (as make test sets)
// they fail instead, so CI cannot pass by skipping them.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/pgserver"
)

// RequireEnv is the environment variable that turns a missing PostgreSQL
// from a skip into a failure.
const RequireEnv = "ALLOT_PG_TESTS"

// startTimeout bounds starting a server for tests (initdb included).
const startTimeout = 2 * time.Minute

// shared is the server Main started for the test binary, or why there is
// none. Main sets it before any test runs and clears it after the last,
// so tests only ever read it.
var shared struct {
	server *pgserver.Server
	err    error
	ran    bool
}

// Main runs a package's tests with one shared server, started before
// them and stopped after; it does not return. Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	shared.ran = true
	if err := pgserver.Available(); err != nil {
		shared.err = err
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	srv, err := pgserver.Start(ctx, pgserver.Options{})
	cancel()
	if err != nil {
		shared.err = fmt.Errorf("pgtest: PostgreSQL is installed but would not start: %w", err)
		return m.Run()
	}
	shared.server = srv
	code := m.Run()
	if err := srv.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: stopping the shared server: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Shared is the server Main started, for a test that needs more than a
// database (its port, a second database). It skips or fails t as
// Database does when there is none.
func Shared(t testing.TB) *pgserver.Server {
	t.Helper()
	if !shared.ran {
		t.Fatal("pgtest: the package's TestMain must call pgtest.Main(m)")
	}
	if shared.server == nil {
		unavailable(t, shared.err)
	}
	return shared.server
}

// Database creates a fresh database on the shared server and returns its
// DSN. Its name comes from the test's, with a random suffix.
func Database(t testing.TB) string {
	t.Helper()
	return CreateDatabase(t, Shared(t))
}

// CreateDatabase creates a fresh database on srv for t and returns its DSN.
func CreateDatabase(t testing.TB, srv *pgserver.Server) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, err := srv.CreateDatabase(ctx, dbName(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// Start starts a server of t's own, closed (stopped by PID, its
// directory removed) when t ends; on failure the end of its log is
// logged first.
func Start(t testing.TB) *pgserver.Server {
	t.Helper()
	if err := pgserver.Available(); err != nil {
		unavailable(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logTail(t, srv)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("pgtest: closing the server: %v", err)
		}
	})
	return srv
}

// unavailable skips t, or fails it under RequireEnv=1.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%v (%s=1: PostgreSQL is required)", err, RequireEnv)
	}
	t.Skipf("%v (set %s=1 to fail instead)", err, RequireEnv)
}

func logTail(t testing.TB, srv *pgserver.Server) {
	t.Helper()
	if srv.LogFile() == "" {
		return
	}
	b, err := os.ReadFile(srv.LogFile())
	if err != nil {
		return
	}
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	t.Logf("end of the PostgreSQL log:\n%s", b)
}

// dbName turns a test's name into a database name: lower case letters,
// digits and underscores, at most 63 bytes with its random suffix.
func dbName(test string) string {
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(test) {
		if b.Len() >= 46 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var suffix [6]byte
	rand.Read(suffix[:]) // never fails (crypto/rand)
	b.WriteByte('_')
	b.WriteString(hex.EncodeToString(suffix[:]))
	return b.String()
}
