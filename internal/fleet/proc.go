package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/allot-io/allot/internal/spawn"
)

// Proc is one allot process, restartable with the same arguments. Its
// output goes to a log file that restarts append to.
type Proc struct {
	Name    string
	Bin     string
	Args    []string
	LogPath string
	// Exited, when set, is called (from the goroutine that waited for
	// it) when a run ends that nothing stopped: no Kill, Terminate or
	// terminating Signal asked it to. Set it before the first Start.
	Exited func(p *Proc, err error)

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when the current run has exited
	err      error         // the current run's exit status, once done
	paused   bool          // SIGSTOPped
	stopping bool          // the current run was sent a terminating signal
	runs     int           // how many times it was started
	started  time.Time     // when the current (or last) run started
}

// Start runs the process again. It is an error to start one that runs.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil && !spawn.Closed(p.done) {
		return fmt.Errorf("%s: already running", p.Name)
	}
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%s: log file: %w", p.Name, err)
	}
	fmt.Fprintf(f, "\n=== %s starting at %s: allot %s\n", p.Name, time.Now().Format(time.RFC3339Nano), strings.Join(p.Args, " "))
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = spawn.Env()
	cmd.SysProcAttr = spawn.SysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: starting: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err, p.paused, p.stopping = cmd, done, nil, false, false
	p.runs++
	p.started = time.Now()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		stopped := p.stopping
		p.mu.Unlock()
		close(done)
		if !stopped && p.Exited != nil {
			p.Exited(p, err)
		}
	}()
	return nil
}

// PID is the current (or last) run's process ID, 0 before the first.
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// UnexpectedExit says how the current run ended if it exited with
// nothing having stopped it (see Exited), and is nil otherwise: while it
// runs, before the first Start, and after Kill or Terminate.
func (p *Proc) UnexpectedExit() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil || !spawn.Closed(p.done) || p.stopping {
		return nil
	}
	return fmt.Errorf("%s exited by itself (%v); its log is %s", p.Name, p.err, p.LogPath)
}

// Pid is the process's PID, or 0 when it does not run.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil || spawn.Closed(p.done) {
		return 0
	}
	return p.cmd.Process.Pid
}

// Started is when the current (or last) run started; zero before the
// first.
func (p *Proc) Started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// Runs is how many times the process was started.
func (p *Proc) Runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

// Running reports whether the process runs (paused or not).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done != nil && !spawn.Closed(p.done)
}

// IsPaused reports whether the process is SIGSTOPped.
func (p *Proc) IsPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Signal sends sig to the process's group. After SIGKILL, SIGTERM,
// SIGINT or SIGQUIT the run's end counts as asked for, not unexpected.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil || spawn.Closed(p.done) {
		return fmt.Errorf("%s: not running", p.Name)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	case syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT:
		p.stopping = true
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("%s: %v: %w", p.Name, sig, err)
	}
	return nil
}

// Wait waits for the current run to exit, up to timeout, and returns
// whether it did and its exit status.
func (p *Proc) Wait(timeout time.Duration) (bool, error) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true, nil
	}
	select {
	case <-done:
	case <-time.After(timeout):
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return true, p.err
}

// Kill SIGKILLs the process group, if it runs, and waits for the exit:
// no signal handler runs, so the process cleans nothing up. It fails only
// if the process outlives the SIGKILL by a minute.
func (p *Proc) Kill() error {
	if !p.Running() {
		return nil
	}
	if err := p.Signal(syscall.SIGKILL); err != nil && p.Running() {
		return err
	}
	if exited, _ := p.Wait(time.Minute); !exited {
		return fmt.Errorf("%s (pid %d): %w a minute after SIGKILL", p.Name, p.PID(), ErrHung)
	}
	return nil
}

// Terminate sends SIGTERM (after SIGCONT, in case it is paused), waits up
// to grace, then SIGKILLs. It returns the exit status of a process that
// exited by itself, or an error saying it had to be killed.
func (p *Proc) Terminate(grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGTERM)
	exited, err := p.Wait(grace)
	if !exited {
		// SIGQUIT makes a Go program write every goroutine's stack to its
		// log before it exits: what it was stuck on.
		_ = p.Signal(syscall.SIGQUIT)
		if exited, _ = p.Wait(5 * time.Second); !exited {
			_ = p.Kill()
		}
		return fmt.Errorf("%s: %w %v after SIGTERM; stacks dumped to %s (SIGQUIT)", p.Name, ErrHung, grace, p.LogPath)
	}
	return err
}

// ErrHung is wrapped when a process outlived SIGTERM's grace, or SIGKILL.
var ErrHung = errors.New("still running")

// BinEnv names the environment variable that hands the test suites an
// allot binary built beforehand. make test builds ./cmd/allot once and
// sets it, so that the packages running real processes (cmd/allot,
// tools/chaos, tools/accuracy), which go test runs side by side, share one
// build rather than each compiling and linking its own while the other
// waits for the cores.
const BinEnv = "ALLOT_BIN"

// BuildAllot builds ./cmd/allot into dir, without the race detector even
// when GOFLAGS asks for it: the harness measures the binaries as shipped.
// When $ALLOT_BIN (BinEnv) names a file, it is returned instead and
// nothing is built.
func BuildAllot(ctx context.Context, dir string) (string, error) {
	if bin := os.Getenv(BinEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s: %w", BinEnv, err)
		}
		return bin, nil
	}
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" {
		return "", errors.New("not inside the allot module: run from the repository")
	}
	path := filepath.Join(dir, "allot")
	build := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/allot")
	build.Dir = root
	var env []string
	for _, kv := range os.Environ() {
		if v, ok := strings.CutPrefix(kv, "GOFLAGS="); ok {
			kv = "GOFLAGS=" + strings.Join(slices.DeleteFunc(strings.Fields(v), func(f string) bool { return f == "-race" }), " ")
		}
		env = append(env, kv)
	}
	build.Env = env
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/allot: %w\n%s", err, out)
	}
	return path, nil
}
