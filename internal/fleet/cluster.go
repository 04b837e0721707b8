package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/allot-io/allot/internal/loopback"
)

// Coordinator is one `allot coordinator` member.
type Coordinator struct {
	*Proc
	ID                   string
	Raft, GRPC, HTTPAddr string
	DataDir              string
	scheme               string
}

// URL is the member's HTTP address for path: HTTPS in a secured cluster.
func (c *Coordinator) URL(path string) string { return c.scheme + "://" + c.HTTPAddr + path }

// Sidecar is one `allot agent` sidecar.
type Sidecar struct {
	*Proc
	ID, HTTPAddr string
}

// URL is the sidecar's address for path.
func (s *Sidecar) URL(path string) string { return "http://" + s.HTTPAddr + path }

// Options lay out a cluster.
type Options struct {
	// Bin is the allot binary every process runs (BuildAllot builds one;
	// `allot demo` passes its own executable). Dir holds the data dirs
	// (Dir/data/<id>), the logs (Dir/logs/<id>.log) and, secured, the
	// credentials (Dir/pki).
	Bin, Dir string
	// RulesPath, when set, is every coordinator's --rules file.
	RulesPath string
	// Sidecars is the number of `allot agent` sidecars; none when zero,
	// for a caller that runs its agents in its own process.
	Sidecars int
	// ReportInterval, LeaseTTL and BillingWindow are passed to every
	// process that takes them; zero leaves the process's default.
	ReportInterval, LeaseTTL, BillingWindow time.Duration
	// Logf logs the cluster's events (default: nowhere).
	Logf func(format string, args ...any)
	// Secure runs the cluster with security on (Creds): mutual TLS
	// between members, TLS and a token per sidecar for reports, and
	// HTTPS with a reader token for status.
	Secure bool
	// AgentTokens are more agent tokens, in a secured cluster, for
	// agents the caller runs itself: by token name, the node IDs each may
	// report as (a tokens file's nodes, such as "gw-*"). Their files are
	// in Creds.Agents under their names.
	AgentTokens map[string]string
	// MaxNewNodesPerMinute, when set, is the coordinators' bound on new
	// node IDs a minute.
	MaxNewNodesPerMinute int
	// SnapshotThreshold and SnapshotInterval, when set, tune the
	// coordinators' Raft snapshots (--snapshot-threshold,
	// --snapshot-interval), so that a run has snapshots to damage.
	SnapshotThreshold int
	SnapshotInterval  time.Duration
	// LedgerSinkFile, when set, is every coordinator's
	// --ledger-sink-file: a file holding the DSN of the PostgreSQL the
	// leader exports final ledger lines to. LedgerExportBatch and
	// LedgerExportInterval, when set, are their --ledger-export-batch
	// and --ledger-export-interval.
	LedgerSinkFile       string
	LedgerExportBatch    int
	LedgerExportInterval time.Duration
	// CoordinatorArgs are more flags for every coordinator.
	CoordinatorArgs []string
	// PollInterval is how often the cluster's waits poll (default
	// 200 ms): shorter to time an election closely.
	PollInterval time.Duration
	// CoordinatorExited, when set, is called when a coordinator exits
	// that nothing stopped (see Proc.Exited).
	CoordinatorExited func(co *Coordinator, err error)
}

// Cluster is three coordinators and the sidecars, on loopback.
type Cluster struct {
	Coords   []*Coordinator
	Sidecars []*Sidecar
	HTTP     *http.Client // for status and health, with a short timeout
	// Creds are the credentials of a secured cluster, nil otherwise.
	Creds *Creds
	logf  func(format string, args ...any)
	poll  time.Duration
}

// ErrOptions is wrapped by New's errors about its Options.
var ErrOptions = errors.New("fleet options")

// New lays out three coordinators and the sidecars on loopback ports,
// with their data and logs under o.Dir. Nothing starts yet.
func New(o Options) (*Cluster, error) {
	const members = 3
	gateways := o.Sidecars
	switch {
	case o.Bin == "" || o.Dir == "":
		return nil, fmt.Errorf("%w: Bin %q, Dir %q: want both", ErrOptions, o.Bin, o.Dir)
	case gateways < 0:
		return nil, fmt.Errorf("%w: Sidecars %d: want 0 or more", ErrOptions, gateways)
	case len(o.AgentTokens) > 0 && !o.Secure:
		return nil, fmt.Errorf("%w: AgentTokens without Secure: an insecure cluster takes no tokens", ErrOptions)
	}
	dir := o.Dir
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		return nil, fmt.Errorf("making the log directory: %w", err)
	}
	ports, err := loopback.Ports(3*members + gateways)
	if err != nil {
		return nil, fmt.Errorf("picking ports: %w", err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	c := &Cluster{HTTP: &http.Client{Timeout: time.Second}, logf: o.Logf, poll: o.PollInterval}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	if c.poll <= 0 {
		c.poll = 200 * time.Millisecond
	}
	var grpcs, coordIDs, sidecarIDs []string
	for i := range members {
		grpcs = append(grpcs, addr(3*i+1))
		coordIDs = append(coordIDs, fmt.Sprintf("c%d", i+1))
	}
	for i := range gateways {
		sidecarIDs = append(sidecarIDs, fmt.Sprintf("gw%d", i+1))
	}
	scheme := "http"
	if o.Secure {
		if c.Creds, err = newCreds(dir, coordIDs, sidecarIDs, o.AgentTokens); err != nil {
			return nil, fmt.Errorf("issuing credentials: %w", err)
		}
		if c.HTTP, err = c.Creds.httpClient(time.Second); err != nil {
			return nil, err
		}
		scheme = "https"
	}
	for i, id := range coordIDs {
		co := &Coordinator{ID: id, Raft: addr(3 * i), GRPC: addr(3*i + 1), HTTPAddr: addr(3*i + 2), DataDir: filepath.Join(dir, "data", id), scheme: scheme}
		args := []string{"coordinator", "--node-id", id, "--data-dir", co.DataDir,
			"--raft-addr", co.Raft, "--grpc-addr", co.GRPC, "--http-addr", co.HTTPAddr}
		if o.RulesPath != "" {
			args = append(args, "--rules", o.RulesPath)
		}
		if c.Creds != nil {
			args = append(args, c.Creds.coordinatorArgs(id)...)
		}
		if o.MaxNewNodesPerMinute != 0 {
			args = append(args, "--max-new-nodes-per-minute", strconv.Itoa(o.MaxNewNodesPerMinute))
		}
		if o.ReportInterval > 0 {
			args = append(args, "--report-interval", o.ReportInterval.String())
		}
		if o.BillingWindow > 0 {
			args = append(args, "--billing-window", o.BillingWindow.String())
		}
		if o.LeaseTTL > 0 {
			args = append(args, "--lease-ttl", o.LeaseTTL.String())
		}
		if o.SnapshotThreshold > 0 {
			args = append(args, "--snapshot-threshold", strconv.Itoa(o.SnapshotThreshold))
		}
		if o.SnapshotInterval > 0 {
			args = append(args, "--snapshot-interval", o.SnapshotInterval.String())
		}
		if o.LedgerSinkFile != "" {
			args = append(args, "--ledger-sink-file", o.LedgerSinkFile)
		}
		if o.LedgerExportBatch > 0 {
			args = append(args, "--ledger-export-batch", strconv.Itoa(o.LedgerExportBatch))
		}
		if o.LedgerExportInterval > 0 {
			args = append(args, "--ledger-export-interval", o.LedgerExportInterval.String())
		}
		args = append(args, o.CoordinatorArgs...)
		// The same flags on every member, as deploy/ starts them: they
		// form the cluster once all three have found each other, and a
		// member restarted with or without its data rejoins it.
		args = append(args, "--bootstrap-expect", strconv.Itoa(members), "--join", strings.Join(grpcs, ","))
		co.Proc = &Proc{Name: id, Bin: o.Bin, Args: args, LogPath: filepath.Join(dir, "logs", id+".log")}
		if o.CoordinatorExited != nil {
			co.Exited = func(_ *Proc, err error) { o.CoordinatorExited(co, err) }
		}
		c.Coords = append(c.Coords, co)
	}
	for i, id := range sidecarIDs {
		s := &Sidecar{ID: id, HTTPAddr: addr(3*members + i)}
		args := []string{"agent", "--coordinators", strings.Join(grpcs, ","), "--node-id", id, "--http-addr", s.HTTPAddr}
		if c.Creds != nil {
			args = append(args, c.Creds.sidecarArgs(id)...)
		}
		if o.ReportInterval > 0 {
			args = append(args, "--report-interval", o.ReportInterval.String())
		}
		s.Proc = &Proc{Name: id, Bin: o.Bin, Args: args, LogPath: filepath.Join(dir, "logs", id+".log")}
		c.Sidecars = append(c.Sidecars, s)
	}
	return c, nil
}

// GRPCAddrs are the coordinators' gRPC addresses, which restarts keep:
// what agents in the caller's process dial.
func (c *Cluster) GRPCAddrs() []string {
	out := make([]string, len(c.Coords))
	for i, co := range c.Coords {
		out[i] = co.GRPC
	}
	return out
}

// Start starts the coordinators, which form the cluster together, and
// then the sidecars, and waits until every member is a voter that knows
// the leader and every sidecar has rules.
func (c *Cluster) Start(ctx context.Context) error {
	for _, co := range c.Coords {
		if err := co.Start(); err != nil {
			return err
		}
	}
	if err := c.WaitFormed(ctx, 60*time.Second); err != nil {
		return err
	}
	for _, s := range c.Sidecars {
		if err := s.Start(); err != nil {
			return err
		}
	}
	for _, s := range c.Sidecars {
		if err := c.WaitHTTP(ctx, s.Proc, s.URL("/healthz"), 60*time.Second); err != nil {
			return fmt.Errorf("sidecar %s never had rules: %w", s.ID, err)
		}
	}
	return nil
}

// StopAll SIGKILLs every process still running and waits for each to
// exit: the harness leaves nothing behind, whatever happened. It returns
// what outlived its SIGKILL, and may be called more than once.
func (c *Cluster) StopAll() error {
	var errs []error
	for _, s := range c.Sidecars {
		errs = append(errs, s.Kill())
	}
	for _, co := range c.Coords {
		errs = append(errs, co.Kill())
	}
	return errors.Join(errs...)
}

// Restart starts a stopped member again with its data, and waits until it
// serves and the cluster has a leader.
func (c *Cluster) Restart(ctx context.Context, co *Coordinator) error {
	if err := co.Start(); err != nil {
		return err
	}
	if err := c.WaitHTTP(ctx, co.Proc, co.URL("/healthz"), 60*time.Second); err != nil {
		return err
	}
	_, err := c.WaitLeader(ctx, 60*time.Second)
	return err
}

// KillLeader SIGKILLs the current leader, waits down, and restarts it.
func (c *Cluster) KillLeader(ctx context.Context, down time.Duration) error {
	leader, err := c.WaitLeader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	_, term := c.FindLeader(ctx)
	c.logf("SIGKILL leader %s (term %d); down for %v", leader.ID, term, down)
	if err := leader.Kill(); err != nil {
		return err
	}
	next, err := c.WaitLeader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	_, term = c.FindLeader(ctx)
	c.logf("new leader %s (term %d)", next.ID, term)
	if err := Sleep(ctx, down); err != nil {
		return err
	}
	if err := c.Restart(ctx, leader); err != nil {
		return fmt.Errorf("restarting %s: %w", leader.ID, err)
	}
	c.logf("%s restarted with its data", leader.ID)
	return nil
}

// KillFollower SIGKILLs the member that has run the longest without
// leading (a settled follower, not one just restarted), waits down, and
// restarts it with its data. It returns the member it killed.
func (c *Cluster) KillFollower(ctx context.Context, down time.Duration) (*Coordinator, error) {
	leader, err := c.WaitLeader(ctx, 60*time.Second)
	if err != nil {
		return nil, err
	}
	var co *Coordinator
	for _, f := range c.Coords {
		if f == leader || !f.Running() || f.IsPaused() {
			continue
		}
		if st, err := c.Status(ctx, f); err != nil || st.State == "Leader" {
			continue
		}
		if co == nil || f.Started().Before(co.Started()) {
			co = f
		}
	}
	if co == nil {
		return nil, errors.New("no follower answers")
	}
	c.logf("SIGKILL follower %s; down for %v", co.ID, down)
	if err := co.Kill(); err != nil {
		return co, err
	}
	if err := Sleep(ctx, down); err != nil {
		return co, err
	}
	if err := c.Restart(ctx, co); err != nil {
		return co, fmt.Errorf("restarting %s: %w", co.ID, err)
	}
	c.logf("%s restarted with its data", co.ID)
	return co, nil
}

// PauseLeader SIGSTOPs the leader for d, then SIGCONTs it.
func (c *Cluster) PauseLeader(ctx context.Context, d time.Duration) error {
	leader, err := c.WaitLeader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	c.logf("SIGSTOP leader %s for %v", leader.ID, d)
	if err := leader.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	serr := Sleep(ctx, d)
	if err := leader.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	next, err := c.WaitLeader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	c.logf("SIGCONT %s; leader now %s", leader.ID, next.ID)
	return nil
}

// Outage SIGKILLs every member, keeps the cluster down for d, and
// restarts every member with its data.
func (c *Cluster) Outage(ctx context.Context, d time.Duration) error {
	c.logf("SIGKILL every coordinator; cluster down for %v", d)
	for _, co := range c.Coords {
		if err := co.Kill(); err != nil {
			return err
		}
	}
	if err := Sleep(ctx, d); err != nil {
		return err
	}
	for _, co := range c.Coords {
		if err := co.Start(); err != nil {
			return err
		}
	}
	leader, err := c.WaitLeader(ctx, 90*time.Second)
	if err != nil {
		return err
	}
	c.logf("cluster back; leader %s", leader.ID)
	return nil
}
