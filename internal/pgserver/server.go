package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/allot-io/allot/internal/loopback"
)

// Superuser is the role initdb makes and every DSN connects as.
const Superuser = "allot"

// StartTimeout bounds Start and Restart when their context has no
// deadline of its own.
const StartTimeout = 60 * time.Second

// signalTimeout bounds the wait for SIGSTOP and SIGCONT to take effect.
const signalTimeout = 10 * time.Second

// stopTimeout is how long Stop waits for a fast shutdown before it falls
// back to an immediate one, and then to SIGKILL.
const stopTimeout = 30 * time.Second

// Options say where a server lives and how it runs.
type Options struct {
	// Dir is the parent of the server's data directory ("data"), socket
	// directory ("sock") and, without Log, log file ("postgres.log").
	// Empty means a new directory from os.MkdirTemp, which Close removes;
	// a Dir given is the caller's and Close leaves it. When this process
	// is root the server runs as the postgres OS user, so Dir's ancestors
	// that this process owns get the search bit for others (o+x).
	Dir string
	// Log receives the server's log; nil means the file postgres.log in
	// Dir, whose end start errors quote.
	Log io.Writer
	// Fast turns off fsync, synchronous_commit and full_page_writes: for
	// benchmarks that are not about the disk. Off by default, so a test
	// or benchmark sees a real server's commit cost.
	Fast bool
	// Settings are more server settings (postgres -c name=value), which
	// win over this package's own.
	Settings map[string]string
}

// Server is one PostgreSQL server this process started: a postmaster on
// a loopback port, trusting every local connection, with the superuser
// Superuser. Its methods are safe for concurrent use.
type Server struct {
	bin     string
	owner   owner
	dir     string // the parent: Options.Dir or the one Start made
	dataDir string
	sockDir string
	remove  []string // directories Close removes
	logFile *os.File // the log Start opened, nil when Options.Log was given
	log     io.Writer
	port    int
	args    []string // postgres's arguments less the port

	mu      sync.Mutex
	cmd     *exec.Cmd     // the running postmaster, nil when stopped
	exited  chan struct{} // closed when cmd has exited
	paused  bool
	closed  bool
	lastErr error // how the last postmaster exited
}

// Start makes a new database cluster (initdb) and starts a server on it
// on a free loopback port, returning once it accepts connections. The
// wait is bounded by ctx's deadline, or by StartTimeout.
func Start(ctx context.Context, opts Options) (_ *Server, err error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	own, err := lookupOwner()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, owner: own, log: opts.Log}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.makeDirs(opts.Dir); err != nil {
		return nil, err
	}
	if s.log == nil {
		f, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
		s.logFile, s.log = f, f
	}
	ctx, cancel := withStartTimeout(ctx)
	defer cancel()
	if err := s.initdb(ctx); err != nil {
		return nil, err
	}
	s.args = serverArgs(s.dataDir, s.sockDir, opts)
	// A free port can be taken between choosing it and the server
	// binding it; a server that exits before it is ready gets another.
	for attempt := 1; ; attempt++ {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		err = s.start(ctx)
		if err == nil || attempt == 3 || ctx.Err() != nil || !errors.Is(err, errExited) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func withStartTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, StartTimeout)
}

// makeDirs makes the parent (when not given), the data directory and the
// socket directory, all reachable by the server's user.
func (s *Server) makeDirs(parent string) error {
	if parent == "" {
		dir, err := os.MkdirTemp("", "allot-pg-")
		if err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		s.dir = dir
		s.remove = append(s.remove, dir)
		if err := s.owner.chown(dir); err != nil {
			return err
		}
	} else {
		abs, err := filepath.Abs(parent)
		if err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		s.dir = abs
	}
	if err := s.owner.reach(s.dir); err != nil {
		return err
	}
	s.dataDir = filepath.Join(s.dir, "data")
	if err := s.owner.mkdir(s.dataDir); err != nil {
		return err
	}
	// A Unix socket's path is limited to 107 bytes; a deep Dir gets its
	// socket directory in the system's temporary directory instead.
	s.sockDir = filepath.Join(s.dir, "sock")
	if len(s.sockDir)+len("/.s.PGSQL.65535") > 100 {
		dir, err := os.MkdirTemp("", "allot-pgs-")
		if err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		s.remove = append(s.remove, dir)
		s.sockDir = dir
		return s.owner.chown(dir)
	}
	return s.owner.mkdir(s.sockDir)
}

// pgHBA trusts the local socket and 127.0.0.1 and nothing else.
const pgHBA = `# pgserver: a throwaway test server trusts local connections only.
local all all trust
host  all all 127.0.0.1/32 trust
`

func (s *Server) initdb(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "initdb"),
		"-D", s.dataDir, "-U", Superuser, "-A", "trust", "-E", "UTF8", "--locale=C",
		"--no-sync", "--no-instructions")
	cmd.Dir = s.dataDir
	cmd.Env = serverEnv()
	cmd.SysProcAttr = s.owner.sysProcAttr()
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: initdb: %w: %s", err, trimOutput(out))
	}
	hba := filepath.Join(s.dataDir, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte(pgHBA), 0o600); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return s.owner.chown(hba)
}

// serverArgs are postgres's arguments less -p.
func serverArgs(dataDir, sockDir string, opts Options) []string {
	set := map[string]string{
		"listen_addresses": "127.0.0.1",
		"max_connections":  "200",
	}
	if opts.Fast {
		set["fsync"] = "off"
		set["synchronous_commit"] = "off"
		set["full_page_writes"] = "off"
	}
	for k, v := range opts.Settings {
		set[k] = v
	}
	names := make([]string, 0, len(set))
	for k := range set {
		names = append(names, k)
	}
	slices.Sort(names)
	args := []string{"-D", dataDir, "-k", sockDir}
	for _, k := range names {
		args = append(args, "-c", k+"="+set[k])
	}
	return args
}

// serverEnv is this process's environment without the PG* variables
// libpq-style programs read, so a developer's PGDATA or PGPORT cannot
// steer the server.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

// freePort picks a free loopback port below the kernel's ephemeral
// range: a server stopped for an outage starts again on the port it had,
// which an outgoing connection made meanwhile could otherwise hold.
func freePort() (int, error) {
	ports, err := loopback.Ports(1)
	if err != nil {
		return 0, fmt.Errorf("pgserver: finding a free port: %w", err)
	}
	return ports[0], nil
}

// errExited is a postmaster that exited before accepting connections.
var errExited = errors.New("the server exited before accepting connections")

// start runs the postmaster and waits until it accepts connections.
func (s *Server) start(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("pgserver: the server is closed")
	}
	if s.cmd != nil {
		s.mu.Unlock()
		return errors.New("pgserver: the server is already running")
	}
	args := append(slices.Clone(s.args), "-p", strconv.Itoa(s.port))
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), args...)
	cmd.Dir = s.dataDir
	cmd.Env = serverEnv()
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = s.owner.sysProcAttr()
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("pgserver: starting postgres: %w", err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited, s.paused = cmd, exited, false
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.lastErr = err
		if s.cmd == cmd {
			s.cmd = nil
		}
		s.mu.Unlock()
		close(exited)
	}()
	if err := s.waitReady(ctx, exited); err != nil {
		s.Kill()
		return err
	}
	return nil
}

// waitReady polls until the server answers a ping on its port.
func (s *Server) waitReady(ctx context.Context, exited <-chan struct{}) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = ping(attempt, s.DSN("postgres"))
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			s.mu.Lock()
			how := s.lastErr
			s.mu.Unlock()
			return fmt.Errorf("pgserver: port %d: %w (%v)%s", s.port, errExited, how, s.logTail())
		case <-ctx.Done():
			return fmt.Errorf("pgserver: waiting for the server on port %d: %w (last try: %v)%s", s.port, ctx.Err(), last, s.logTail())
		case <-tick.C:
		}
	}
}

func ping(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// logTail is the end of the server's log file for an error message, or
// a pointer to the caller's log.
func (s *Server) logTail() string {
	if s.logFile == nil {
		return "; see the server log"
	}
	b, err := os.ReadFile(s.logFile.Name())
	if err != nil || len(b) == 0 {
		return ""
	}
	return "; server log: " + trimOutput(b)
}

// DSN is the URL of database db as the superuser over TCP.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, s.port, url.PathEscape(db))
}

// CreateDatabase creates database name and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgserver: creating database %s: %w", name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgserver: creating database %s: %w", name, err)
	}
	return s.DSN(name), nil
}

// PID is the postmaster's process ID, 0 when it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Port is the server's TCP port on 127.0.0.1, the same across restarts.
func (s *Server) Port() int { return s.port }

// DataDir is the server's data directory.
func (s *Server) DataDir() string { return s.dataDir }

// LogFile is the path of the server's log, "" when Options.Log was given.
func (s *Server) LogFile() string {
	if s.logFile == nil {
		return ""
	}
	return s.logFile.Name()
}

// running returns the postmaster and its exit channel, nil when stopped.
func (s *Server) running() (*exec.Cmd, chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd, s.exited, s.paused
}

// Stop shuts the server down fast (SIGINT: sessions are ended, nothing
// is lost) and waits for it and its backends to exit. A server that does
// not stop in time gets an immediate shutdown, then SIGKILL. Stopping a
// stopped server does nothing; a paused one is resumed first.
func (s *Server) Stop() error {
	cmd, exited, paused := s.running()
	if cmd == nil {
		return nil
	}
	if paused {
		if err := s.Resume(); err != nil {
			return err
		}
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT} {
		if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("pgserver: stopping postgres (pid %d): %w", cmd.Process.Pid, err)
		}
		select {
		case <-exited:
			return nil
		case <-time.After(stopTimeout):
		}
	}
	return s.Kill()
}

// Kill crashes the server: SIGKILL to the postmaster and every backend,
// as a power cut would. It waits until all of them are gone, so Restart
// can start on the same data directory (which recovers from its WAL).
func (s *Server) Kill() error {
	cmd, exited, _ := s.running()
	if cmd == nil {
		return nil
	}
	pid := cmd.Process.Pid
	// Freeze the postmaster first so it forks no backend between the
	// listing and the kill. Should it not freeze in time, it is killed
	// all the same; only a backend forked meanwhile could escape.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgserver: stopping postgres (pid %d): %w", pid, err)
	}
	frozen := waitState([]int{pid}, true, signalTimeout)
	kids, err := children(pid)
	if err != nil {
		return err
	}
	if err := signalAll(append(kids, pid), syscall.SIGKILL); err != nil {
		return err
	}
	<-exited
	return errors.Join(frozen, waitGone(kids, 10*time.Second))
}

// waitGone waits until none of pids is alive.
func waitGone(pids []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		left := slices.DeleteFunc(slices.Clone(pids), func(pid int) bool { return !alive(pid) })
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgserver: processes %v still alive %v after SIGKILL", left, timeout)
		}
		<-tick.C
	}
}

// Restart starts the server again, on the same port and data directory,
// after Stop or Kill, waiting as Start does until it accepts connections.
func (s *Server) Restart(ctx context.Context) error {
	ctx, cancel := withStartTimeout(ctx)
	defer cancel()
	return s.start(ctx)
}

// Pause freezes the server (SIGSTOP to the postmaster and all its
// children) and returns once all of them are stopped: connections stay
// open and nothing answers, as with a hung host. Resume thaws it.
func (s *Server) Pause() error {
	cmd, _, _ := s.running()
	if cmd == nil {
		return errors.New("pgserver: pause: the server is not running")
	}
	pid := cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgserver: pause: %w", err)
	}
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
	// The postmaster, once stopped, forks no more, so the listing after
	// that has every child.
	if err := waitState([]int{pid}, true, signalTimeout); err != nil {
		return err
	}
	kids, err := children(pid)
	if err != nil {
		return err
	}
	if err := signalAll(kids, syscall.SIGSTOP); err != nil {
		return err
	}
	return waitState(kids, true, signalTimeout)
}

// Resume thaws a paused server: its children first, then the postmaster.
func (s *Server) Resume() error {
	cmd, _, _ := s.running()
	if cmd == nil {
		return errors.New("pgserver: resume: the server is not running")
	}
	pid := cmd.Process.Pid
	kids, err := children(pid)
	if err != nil {
		return err
	}
	if err := signalAll(append(kids, pid), syscall.SIGCONT); err != nil {
		return err
	}
	if err := waitState(append(kids, pid), false, signalTimeout); err != nil {
		return err
	}
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	return nil
}

// Close stops the server and removes the directories Start made. It is
// idempotent; after it the server cannot be restarted.
func (s *Server) Close() error {
	err := s.Stop()
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if already {
		return err
	}
	if s.logFile != nil {
		s.logFile.Close()
	}
	for _, dir := range s.remove {
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("pgserver: %w", rmErr))
		}
	}
	return err
}
