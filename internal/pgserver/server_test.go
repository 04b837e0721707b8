package pgserver_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/allot-io/allot/internal/pgserver"
	"github.com/allot-io/allot/internal/pgserver/pgtest"
	"github.com/allot-io/allot/internal/testwait"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// exec runs sql on db of srv.
func exec(t *testing.T, srv *pgserver.Server, db, sql string) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	conn, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// count is the number of rows in table t1 of db.
func count(t *testing.T, srv *pgserver.Server, db string) int {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	conn, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// ping tries one connection with a short deadline.
func ping(srv *pgserver.Server, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// procAlive reads /proc: a process gone or a zombie is not alive.
func procAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// procState is the state letter of pid in /proc.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	return strings.Fields(string(b[i+1:]))[0]
}

// backends lists pid's children from /proc, as the package does.
func backends(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

func TestCloseLeavesNoProcess(t *testing.T) {
	srv := pgtest.Start(t)
	pid := srv.PID()
	kids := backends(t, pid)
	if pid == 0 || len(kids) == 0 {
		t.Fatalf("pid %d with children %v: want a running postmaster with its auxiliary processes", pid, kids)
	}
	dir := filepath.Dir(srv.DataDir())
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(kids, pid) {
		if procAlive(p) {
			t.Errorf("process %d is alive after Close", p)
		}
	}
	if srv.PID() != 0 {
		t.Errorf("PID() = %d after Close, want 0", srv.PID())
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the server's directory %s is still there: %v", dir, err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if err := srv.Restart(context.Background()); err == nil {
		t.Error("Restart after Close succeeded")
	}
}

func TestStopAndKillThenRestart(t *testing.T) {
	srv := pgtest.Start(t)
	exec(t, srv, "postgres", "CREATE TABLE t1 (x int)")
	tests := []struct {
		name string
		down func() error
	}{
		{"stop", srv.Stop},
		{"kill", srv.Kill},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exec(t, srv, "postgres", "INSERT INTO t1 VALUES (1)")
			pid, port := srv.PID(), srv.Port()
			kids := backends(t, pid)
			if err := tt.down(); err != nil {
				t.Fatal(err)
			}
			for _, p := range append(kids, pid) {
				if procAlive(p) {
					t.Errorf("process %d is alive after %s", p, tt.name)
				}
			}
			if err := ping(srv, 2*time.Second); err == nil {
				t.Fatalf("the server answers after %s", tt.name)
			}
			if err := tt.down(); err != nil {
				t.Errorf("%s of a stopped server: %v", tt.name, err)
			}
			if err := srv.Restart(ctxFor(t, time.Minute)); err != nil {
				t.Fatal(err)
			}
			if srv.Port() != port || srv.PID() == pid {
				t.Errorf("after Restart: port %d pid %d, before: port %d pid %d", srv.Port(), srv.PID(), port, pid)
			}
			if got := count(t, srv, "postgres"); got != i+1 {
				t.Errorf("after %s and Restart %d committed rows, want %d", tt.name, got, i+1)
			}
			if err := srv.Restart(ctxFor(t, time.Minute)); err == nil {
				t.Error("Restart of a running server succeeded")
			}
		})
	}
}

func TestPauseResume(t *testing.T) {
	srv := pgtest.Start(t)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(backends(t, srv.PID()), srv.PID()) {
		// Z: a backend that exited just before, which the stopped
		// postmaster has not reaped.
		if s := procState(p); s != "T" && s != "Z" {
			t.Errorf("process %d is in state %q while paused, want T (stopped)", p, s)
		}
	}
	if err := ping(srv, 300*time.Millisecond); err == nil {
		t.Fatal("a paused server answered")
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the resumed server to answer", func() bool {
		return ping(srv, time.Second) == nil
	})
	// Stop resumes a paused server before shutting it down.
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	pid := srv.PID()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if procAlive(pid) {
		t.Errorf("postmaster %d alive after Stop of a paused server", pid)
	}
}

func TestDatabases(t *testing.T) {
	srv := pgtest.Start(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = srv.CreateDatabase(ctxFor(t, time.Minute), "Db-"+strconv.Itoa(i))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("database %d: %v", i, err)
		}
		exec(t, srv, "Db-"+strconv.Itoa(i), "CREATE TABLE t1 (x int)")
	}
	if _, err := srv.CreateDatabase(ctxFor(t, time.Minute), "Db-0"); err == nil {
		t.Error("creating a database twice succeeded")
	}
}

func TestOptions(t *testing.T) {
	// A deep Dir of the caller's (t.TempDir is 0700, root's when root):
	// the socket moves to a short path, the server's user is let in.
	dir := filepath.Join(t.TempDir(), strings.Repeat("deep", 20))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	srv, err := pgserver.Start(ctxFor(t, 2*time.Minute), pgserver.Options{
		Dir:      dir,
		Log:      &log,
		Fast:     true,
		Settings: map[string]string{"application_name": "pgserver_test", "log_min_messages": "info"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if got := filepath.Dir(srv.DataDir()); got != dir {
		t.Errorf("data directory %s, want one in %s", srv.DataDir(), dir)
	}
	ctx := ctxFor(t, 30*time.Second)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"fsync": "off", "synchronous_commit": "off", "listen_addresses": "127.0.0.1", "lc_collate": "C", "server_encoding": "UTF8"} {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	conn.Close(ctx)
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("Close removed the caller's Dir: %v", err)
	}
	if srv.LogFile() != "" || log.Len() == 0 {
		t.Errorf("LogFile() = %q and %d bytes logged: want the log in Options.Log", srv.LogFile(), log.Len())
	}
}

// syncBuffer is a bytes.Buffer safe for the server's log copier and the
// test together.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

func TestAvailable(t *testing.T) {
	if err := pgserver.Available(); err != nil {
		if !errors.Is(err, pgserver.ErrNotInstalled) || !strings.Contains(err.Error(), "apt-get install postgresql") {
			t.Errorf("Available() = %v: want ErrNotInstalled naming apt-get install postgresql", err)
		}
		pgtest.Start(t) // skips, or fails under ALLOT_PG_TESTS=1
	}
}
