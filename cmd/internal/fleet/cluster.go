package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/allot-io/allot/cmd/internal/spawn"
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
	Bin, Dir, RulesPath string
	// Sidecars is the number of `allot agent` sidecars (default 3).
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
	// MaxNewNodesPerMinute, when set, is the coordinators' bound on new
	// node IDs a minute.
	MaxNewNodesPerMinute int
	// SnapshotThreshold and SnapshotInterval, when set, tune the
	// coordinators' Raft snapshots (--snapshot-threshold,
	// --snapshot-interval), so that a run has snapshots to damage.
	SnapshotThreshold int
	SnapshotInterval  time.Duration
	// CoordinatorArgs are more flags for every coordinator.
	CoordinatorArgs []string
}

// Cluster is three coordinators and the sidecars, on loopback.
type Cluster struct {
	Coords   []*Coordinator
	Sidecars []*Sidecar
	HTTP     *http.Client // for status and health, with a short timeout
	// Creds are the credentials of a secured cluster, nil otherwise.
	Creds *Creds
	logf  func(format string, args ...any)
}

// New lays out three coordinators and the sidecars on loopback ports,
// with their data and logs under o.Dir. Nothing starts yet.
func New(o Options) (*Cluster, error) {
	const members = 3
	gateways := o.Sidecars
	if gateways <= 0 {
		gateways = 3
	}
	ports, err := spawn.LoopbackPorts(3*members + gateways)
	if err != nil {
		return nil, fmt.Errorf("picking ports: %w", err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	c := &Cluster{HTTP: &http.Client{Timeout: time.Second}, logf: o.Logf}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	dir := o.Dir
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
		if c.Creds, err = newCreds(dir, coordIDs, sidecarIDs); err != nil {
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
			"--raft-addr", co.Raft, "--grpc-addr", co.GRPC, "--http-addr", co.HTTPAddr, "--rules", o.RulesPath}
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
		args = append(args, o.CoordinatorArgs...)
		// The same flags on every member, as deploy/ starts them: they
		// form the cluster once all three have found each other, and a
		// member restarted with or without its data rejoins it.
		args = append(args, "--bootstrap-expect", strconv.Itoa(members), "--join", strings.Join(grpcs, ","))
		co.Proc = &Proc{Name: id, Bin: o.Bin, Args: args, LogPath: filepath.Join(dir, "logs", id+".log")}
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

// Start starts the coordinators, which form the cluster together, and
// then the sidecars, and waits until every member is a voter and every
// sidecar has rules.
func (c *Cluster) Start(ctx context.Context) error {
	for _, co := range c.Coords {
		if err := co.Start(); err != nil {
			return err
		}
	}
	if err := c.WaitVoters(ctx, len(c.Coords), 60*time.Second); err != nil {
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

// StopAll kills every process still running: the harness leaves nothing
// behind, whatever happened.
func (c *Cluster) StopAll() {
	for _, s := range c.Sidecars {
		s.Kill()
	}
	for _, co := range c.Coords {
		co.Kill()
	}
}

// MemberStatus is the part of a coordinator's GET /v1/status the harness
// reads (protobuf JSON: 64-bit integers are strings).
type MemberStatus struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	LeaderID string `json:"leader_id"`
	Term     string `json:"term"`
	Members  []struct {
		ID    string `json:"id"`
		Voter bool   `json:"voter"`
	} `json:"members"`
}

func (c *Cluster) Status(ctx context.Context, co *Coordinator) (*MemberStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, co.URL("/v1/status"), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s status: %w", co.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s status: %s", co.ID, resp.Status)
	}
	var st MemberStatus
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return nil, fmt.Errorf("%s status: %w", co.ID, err)
	}
	return &st, nil
}

// ReportsAnswered is the reports a member has answered (its
// allot_coordinator_reports_total{result="ok"}).
func (c *Cluster) ReportsAnswered(ctx context.Context, co *Coordinator) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, co.URL("/metrics"), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, err
	}
	const series = `allot_coordinator_reports_total{result="ok"} `
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// FindLeader asks every running, unpaused member for its status and
// returns the member that says it leads at the highest term, or nil.
func (c *Cluster) FindLeader(ctx context.Context) (*Coordinator, uint64) {
	var best *Coordinator
	var bestTerm uint64
	for _, co := range c.Coords {
		if !co.Running() || co.IsPaused() {
			continue
		}
		st, err := c.Status(ctx, co)
		if err != nil || st.State != "Leader" {
			continue
		}
		term, _ := strconv.ParseUint(st.Term, 10, 64)
		if best == nil || term > bestTerm {
			best, bestTerm = co, term
		}
	}
	return best, bestTerm
}

// WaitLeader waits until some member leads.
func (c *Cluster) WaitLeader(ctx context.Context, timeout time.Duration) (*Coordinator, error) {
	var leader *Coordinator
	err := Poll(ctx, timeout, "a leader", func() (bool, error) {
		if err := c.ExitedEarly(); err != nil {
			return false, err
		}
		leader, _ = c.FindLeader(ctx)
		return leader != nil, nil
	})
	return leader, err
}

// WaitVoters waits until the leader counts n voters.
func (c *Cluster) WaitVoters(ctx context.Context, n int, timeout time.Duration) error {
	return Poll(ctx, timeout, fmt.Sprintf("%d voting members", n), func() (bool, error) {
		if err := c.ExitedEarly(); err != nil {
			return false, err
		}
		leader, _ := c.FindLeader(ctx)
		if leader == nil {
			return false, nil
		}
		st, err := c.Status(ctx, leader)
		if err != nil {
			return false, nil
		}
		voters := 0
		for _, m := range st.Members {
			if m.Voter {
				voters++
			}
		}
		return voters >= n, nil
	})
}

// WaitHTTP waits until url answers 200.
func (c *Cluster) WaitHTTP(ctx context.Context, p *Proc, url string, timeout time.Duration) error {
	return Poll(ctx, timeout, url, func() (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("%s exited (see %s)", p.Name, p.LogPath)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := c.HTTP.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// ExitedEarly reports a coordinator that exited while it should run.
func (c *Cluster) ExitedEarly() error {
	for _, co := range c.Coords {
		co.mu.Lock()
		done, err := co.done, co.err
		co.mu.Unlock()
		if done != nil && spawn.Closed(done) && err != nil && !strings.Contains(err.Error(), "killed") {
			return fmt.Errorf("coordinator %s exited: %v (see %s)", co.ID, err, co.LogPath)
		}
	}
	return nil
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
	leader.Kill()
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
		co.Kill()
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

// Poll calls cond every 200 ms until it holds, fails, or timeout passes.
func Poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		if err := Sleep(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
	}
}

// Sleep waits d or until ctx is done.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
