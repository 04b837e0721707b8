package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/allot-io/allot/cmd/internal/spawn"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
)

// demoExecutable is the binary the demo runs its coordinators from: this
// one, whose `coordinator` subcommand is a cluster member. Tests, whose
// own executable is the test binary, point it at a built allot.
var demoExecutable = os.Executable

// demoCluster is the demo's coordinator cluster: three `allot coordinator`
// processes, children of this one, on loopback ports, each with its data
// directory and log file in the demo's directory.
type demoCluster struct {
	members []*demoMember
	// exited is called when a member exits without being killed.
	exited func(m *demoMember, err error)
}

// demoMember is one coordinator process, restartable with the same
// arguments and data directory.
type demoMember struct {
	id       string
	bin      string
	args     []string
	grpcAddr string
	logPath  string
	conn     *grpc.ClientConn // reconnects across restarts
	cluster  *demoCluster

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed once the current run has exited
	err     error         // the current run's exit status, once done
	killing bool          // the current run is being killed on purpose
}

// demoMemberIDs are the coordinators' node IDs; c1 bootstraps.
var demoMemberIDs = []string{"c1", "c2", "c3"}

// newDemoCluster lays out three members in dir (c1 bootstraps, the others
// join it) on free loopback ports, each serving and dialled with creds.
// Nothing runs until start.
func newDemoCluster(dir string, creds *demoCreds) (*demoCluster, error) {
	bin, err := demoExecutable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary to run the coordinators: %w", err)
	}
	ports, err := spawn.LoopbackPorts(2 * len(demoMemberIDs))
	if err != nil {
		return nil, fmt.Errorf("picking loopback ports: %w", err)
	}
	// The demo's own calls (status, rules) go over TLS with the admin
	// token, as an operator's would.
	dial, err := creds.dialOptions()
	if err != nil {
		return nil, err
	}
	c := &demoCluster{}
	for i, id := range demoMemberIDs {
		secure, err := creds.memberArgs(id)
		if err != nil {
			c.stop()
			return nil, err
		}
		raftAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i]))
		grpcAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1]))
		args := []string{"coordinator", "--node-id", id, "--data-dir", filepath.Join(dir, id),
			"--raft-addr", raftAddr, "--grpc-addr", grpcAddr, "--http-addr=", "--region", "demo"}
		args = append(args, secure...)
		if i == 0 {
			args = append(args, "--bootstrap")
		} else {
			args = append(args, "--join", c.members[0].grpcAddr)
		}
		cc, err := grpc.NewClient(grpcAddr, dial...)
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("%s: dialling %s: %w", id, grpcAddr, err)
		}
		c.members = append(c.members, &demoMember{id: id, bin: bin, args: args, grpcAddr: grpcAddr,
			logPath: filepath.Join(dir, id+".log"), conn: cc, cluster: c})
	}
	return c, nil
}

// start starts the first member, waits for it to lead, then starts the
// others and waits until every member sees all three and the leader.
func (c *demoCluster) start(ctx context.Context) error {
	first := c.members[0]
	if err := first.start(); err != nil {
		return err
	}
	err := c.waitFor(ctx, 30*time.Second, first.id+" to lead", func(ctx context.Context) (bool, string) {
		st, err := first.status(ctx)
		if err != nil {
			return false, err.Error()
		}
		return st.GetState() == "Leader", "state " + st.GetState()
	})
	if err != nil {
		return err
	}
	for _, m := range c.members[1:] {
		if err := m.start(); err != nil {
			return err
		}
	}
	return c.waitFor(ctx, 30*time.Second, "three members, each seeing the others and the leader", func(ctx context.Context) (bool, string) {
		for _, m := range c.members {
			st, err := m.status(ctx)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", m.id, err)
			}
			if len(st.GetMembers()) != 3 || st.GetLeaderId() == "" {
				return false, fmt.Sprintf("%s sees %d members, leader %q", m.id, len(st.GetMembers()), st.GetLeaderId())
			}
		}
		return true, ""
	})
}

// waitFor polls cond every 50 ms until it holds, the timeout passes, or a
// member that should run has exited (whatever cond waits for will then not
// come). Each poll gets a context bounded by the timeout.
func (c *demoCluster) waitFor(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		ok, why := cond(ctx)
		if ok {
			return nil
		}
		for _, m := range c.members {
			if err := m.unexpectedExit(); err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
		}
		select {
		case <-ctx.Done():
			if why != "" {
				why = " (last: " + why + ")"
			}
			return fmt.Errorf("waiting %v for %s%s: %w", timeout, what, why, ctx.Err())
		case <-t.C:
		}
	}
}

// leader is the running member that says it leads, with its status, or
// nil.
func (c *demoCluster) leader(ctx context.Context) (*demoMember, *allotpb.StatusResponse) {
	for _, m := range c.members {
		if !m.running() {
			continue
		}
		if st, err := m.status(ctx); err == nil && st.GetState() == "Leader" {
			return m, st
		}
	}
	return nil, nil
}

// follower is a running member that does not lead, or nil.
func (c *demoCluster) follower(ctx context.Context) *demoMember {
	for _, m := range c.members {
		if !m.running() {
			continue
		}
		if st, err := m.status(ctx); err == nil && st.GetState() != "Leader" {
			return m
		}
	}
	return nil
}

// grpcAddrs are the members' gRPC addresses, which survive restarts.
func (c *demoCluster) grpcAddrs() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.grpcAddr)
	}
	return out
}

// describe lists the members as "c1 pid 123 grpc 127.0.0.1:12345, …".
func (c *demoCluster) describe() string {
	var parts []string
	for _, m := range c.members {
		parts = append(parts, fmt.Sprintf("%s pid %d grpc %s", m.id, m.pid(), m.grpcAddr))
	}
	return strings.Join(parts, ", ")
}

// stop SIGKILLs every member still running and waits for each to exit:
// the demo's data directory is removed next, so there is nothing a clean
// shutdown would keep. It is safe to call more than once.
func (c *demoCluster) stop() {
	for _, m := range c.members {
		_ = m.kill()
		_ = m.conn.Close()
	}
}

// tailLogs writes the end of each member's log.
func (c *demoCluster) tailLogs(w io.Writer) {
	for _, m := range c.members {
		tailFile(w, m.id+" (allot "+strings.Join(m.args, " ")+")", m.logPath, 20)
	}
}

// start runs the member (again). Its output is appended to its log file.
func (m *demoMember) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done != nil && !spawn.Closed(m.done) {
		return fmt.Errorf("%s: already running", m.id)
	}
	f, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%s: log file: %w", m.id, err)
	}
	fmt.Fprintf(f, "=== allot demo: starting %s at %s: %s %s\n", m.id, time.Now().Format(time.RFC3339Nano), m.bin, strings.Join(m.args, " "))
	cmd := exec.Command(m.bin, m.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = spawn.Env()
	cmd.SysProcAttr = spawn.SysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: starting %s: %w", m.id, m.bin, err)
	}
	done := make(chan struct{})
	m.cmd, m.done, m.err, m.killing = cmd, done, nil, false
	go func() {
		err := cmd.Wait()
		f.Close()
		m.mu.Lock()
		m.err = err
		killed := m.killing
		m.mu.Unlock()
		close(done)
		if !killed && m.cluster.exited != nil {
			m.cluster.exited(m, err)
		}
	}()
	return nil
}

// kill SIGKILLs the member, if it runs, and waits until it has exited: no
// signal handler runs, so it neither closes Raft nor hands leadership on.
func (m *demoMember) kill() error {
	m.mu.Lock()
	if m.done == nil || spawn.Closed(m.done) {
		m.mu.Unlock()
		return nil
	}
	m.killing = true
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: SIGKILL: %w", m.id, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s (pid %d) still running 30s after SIGKILL", m.id, cmd.Process.Pid)
	}
}

func (m *demoMember) running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.done != nil && !spawn.Closed(m.done)
}

// unexpectedExit says how the member exited, if it did without being
// killed.
func (m *demoMember) unexpectedExit() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done == nil || !spawn.Closed(m.done) || m.killing {
		return nil
	}
	return fmt.Errorf("%s exited (%v); its log is %s", m.id, m.err, m.logPath)
}

// pid is the current run's process ID, or 0.
func (m *demoMember) pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.cmd.Process == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// status asks the member for its own view, within half a second.
func (m *demoMember) status(ctx context.Context) (*allotpb.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	st, err := allotpb.NewClusterServiceClient(m.conn).Status(ctx, &allotpb.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("%s status: %w", m.id, err)
	}
	return st, nil
}

// tailFile writes the last n lines of the file at path, under a heading.
func tailFile(w io.Writer, name, path string, n int) {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	fmt.Fprintf(w, "last lines of the log of %s:\n", name)
	for _, l := range lines[max(0, len(lines)-n):] {
		fmt.Fprintln(w, "  "+l)
	}
}
