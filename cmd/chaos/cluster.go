package main

import (
	"bufio"
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

// coordinator is one `allot coordinator` member.
type coordinator struct {
	*proc
	id                   string
	raft, grpc, httpAddr string
}

// sidecar is one `allot agent` sidecar.
type sidecar struct {
	*proc
	id, httpAddr string
}

func (s *sidecar) url(path string) string { return "http://" + s.httpAddr + path }

// cluster is the processes under test.
type cluster struct {
	coords   []*coordinator
	sidecars []*sidecar
	http     *http.Client // for status and health, with a short timeout
	log      *phaseLog
}

// newCluster lays out three coordinators and three sidecars on loopback
// ports, with their data and logs under dir.
func newCluster(cfg *config, bin, dir, rulesPath string, log *phaseLog) (*cluster, error) {
	const members, gateways = 3, 3
	ports, err := spawn.LoopbackPorts(3*members + gateways)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	c := &cluster{http: &http.Client{Timeout: time.Second}, log: log}
	var grpcs []string
	for i := range members {
		grpcs = append(grpcs, addr(3*i+1))
	}
	for i := range members {
		id := fmt.Sprintf("c%d", i+1)
		co := &coordinator{id: id, raft: addr(3 * i), grpc: addr(3*i + 1), httpAddr: addr(3*i + 2)}
		args := []string{"coordinator", "--node-id", id, "--data-dir", filepath.Join(dir, "data", id),
			"--raft-addr", co.raft, "--grpc-addr", co.grpc, "--http-addr", co.httpAddr,
			"--rules", rulesPath, "--report-interval", cfg.reportInterval.String(),
			"--billing-window", cfg.billingWindow.String()}
		if cfg.leaseTTL > 0 {
			args = append(args, "--lease-ttl", cfg.leaseTTL.String())
		}
		if i == 0 {
			args = append(args, "--bootstrap")
		} else {
			// Any member will do; a restarted member ignores --join.
			args = append(args, "--join", strings.Join(grpcs[:i], ","))
		}
		co.proc = &proc{name: id, bin: bin, args: args, logPath: filepath.Join(dir, "logs", id+".log")}
		c.coords = append(c.coords, co)
	}
	for i := range gateways {
		id := fmt.Sprintf("gw%d", i+1)
		s := &sidecar{id: id, httpAddr: addr(3*members + i)}
		args := []string{"agent", "--coordinators", strings.Join(grpcs, ","), "--node-id", id,
			"--http-addr", s.httpAddr, "--report-interval", cfg.reportInterval.String()}
		s.proc = &proc{name: id, bin: bin, args: args, logPath: filepath.Join(dir, "logs", id+".log")}
		c.sidecars = append(c.sidecars, s)
	}
	return c, nil
}

// start starts the coordinators (the first bootstraps, the others join
// once it leads) and then the sidecars, and waits until every member is a
// voter and every sidecar has rules.
func (c *cluster) start(ctx context.Context) error {
	if err := c.coords[0].start(); err != nil {
		return err
	}
	if _, err := c.waitLeader(ctx, 60*time.Second); err != nil {
		return err
	}
	for _, co := range c.coords[1:] {
		if err := co.start(); err != nil {
			return err
		}
	}
	if err := c.waitVoters(ctx, len(c.coords), 60*time.Second); err != nil {
		return err
	}
	for _, s := range c.sidecars {
		if err := s.start(); err != nil {
			return err
		}
	}
	for _, s := range c.sidecars {
		if err := c.waitHTTP(ctx, s.proc, s.url("/healthz"), 60*time.Second); err != nil {
			return fmt.Errorf("sidecar %s never had rules: %w", s.id, err)
		}
	}
	return nil
}

// stopAll kills every process still running: the harness leaves nothing
// behind, whatever happened.
func (c *cluster) stopAll() {
	for _, s := range c.sidecars {
		s.kill()
	}
	for _, co := range c.coords {
		co.kill()
	}
}

// memberStatus is the part of a coordinator's GET /v1/status the harness
// reads (protobuf JSON: 64-bit integers are strings).
type memberStatus struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	LeaderID string `json:"leader_id"`
	Term     string `json:"term"`
	Members  []struct {
		ID    string `json:"id"`
		Voter bool   `json:"voter"`
	} `json:"members"`
}

func (c *cluster) status(ctx context.Context, co *coordinator) (*memberStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+co.httpAddr+"/v1/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s status: %w", co.id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s status: %s", co.id, resp.Status)
	}
	var st memberStatus
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return nil, fmt.Errorf("%s status: %w", co.id, err)
	}
	return &st, nil
}

// findLeader asks every running, unpaused member for its status and
// returns the member that says it leads at the highest term, or nil.
func (c *cluster) findLeader(ctx context.Context) (*coordinator, uint64) {
	var best *coordinator
	var bestTerm uint64
	for _, co := range c.coords {
		if !co.running() || co.isPaused() {
			continue
		}
		st, err := c.status(ctx, co)
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

// waitLeader waits until some member leads.
func (c *cluster) waitLeader(ctx context.Context, timeout time.Duration) (*coordinator, error) {
	var leader *coordinator
	err := poll(ctx, timeout, "a leader", func() (bool, error) {
		if err := c.exitedEarly(); err != nil {
			return false, err
		}
		leader, _ = c.findLeader(ctx)
		return leader != nil, nil
	})
	return leader, err
}

// waitVoters waits until the leader counts n voters.
func (c *cluster) waitVoters(ctx context.Context, n int, timeout time.Duration) error {
	return poll(ctx, timeout, fmt.Sprintf("%d voting members", n), func() (bool, error) {
		if err := c.exitedEarly(); err != nil {
			return false, err
		}
		leader, _ := c.findLeader(ctx)
		if leader == nil {
			return false, nil
		}
		st, err := c.status(ctx, leader)
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

// waitHTTP waits until url answers 200.
func (c *cluster) waitHTTP(ctx context.Context, p *proc, url string, timeout time.Duration) error {
	return poll(ctx, timeout, url, func() (bool, error) {
		if !p.running() {
			return false, fmt.Errorf("%s exited (see %s)", p.name, p.logPath)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// exitedEarly reports a coordinator that exited while it should run.
func (c *cluster) exitedEarly() error {
	for _, co := range c.coords {
		co.mu.Lock()
		done, err := co.done, co.err
		co.mu.Unlock()
		if done != nil && spawn.Closed(done) && err != nil && !strings.Contains(err.Error(), "killed") {
			return fmt.Errorf("coordinator %s exited: %v (see %s)", co.id, err, co.logPath)
		}
	}
	return nil
}

// restart starts a stopped member again with its data, and waits until it
// serves and the cluster has a leader.
func (c *cluster) restart(ctx context.Context, co *coordinator) error {
	if err := co.start(); err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, co.proc, "http://"+co.httpAddr+"/healthz", 60*time.Second); err != nil {
		return err
	}
	_, err := c.waitLeader(ctx, 60*time.Second)
	return err
}

// killLeader SIGKILLs the current leader, waits down, and restarts it.
func (c *cluster) killLeader(ctx context.Context, down time.Duration) error {
	leader, err := c.waitLeader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	_, term := c.findLeader(ctx)
	c.log.logf("SIGKILL leader %s (term %d); down for %v", leader.id, term, down)
	leader.kill()
	next, err := c.waitLeader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	_, term = c.findLeader(ctx)
	c.log.logf("new leader %s (term %d)", next.id, term)
	if err := sleep(ctx, down); err != nil {
		return err
	}
	if err := c.restart(ctx, leader); err != nil {
		return fmt.Errorf("restarting %s: %w", leader.id, err)
	}
	c.log.logf("%s restarted with its data", leader.id)
	return nil
}

// pauseLeader SIGSTOPs the leader for d, then SIGCONTs it.
func (c *cluster) pauseLeader(ctx context.Context, d time.Duration) error {
	leader, err := c.waitLeader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	c.log.logf("SIGSTOP leader %s for %v", leader.id, d)
	if err := leader.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	serr := sleep(ctx, d)
	if err := leader.signal(syscall.SIGCONT); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	next, err := c.waitLeader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	c.log.logf("SIGCONT %s; leader now %s", leader.id, next.id)
	return nil
}

// outage SIGKILLs every member, keeps the cluster down for d, and
// restarts every member with its data.
func (c *cluster) outage(ctx context.Context, d time.Duration) error {
	c.log.logf("SIGKILL every coordinator; cluster down for %v", d)
	for _, co := range c.coords {
		co.kill()
	}
	if err := sleep(ctx, d); err != nil {
		return err
	}
	for _, co := range c.coords {
		if err := co.start(); err != nil {
			return err
		}
	}
	leader, err := c.waitLeader(ctx, 90*time.Second)
	if err != nil {
		return err
	}
	c.log.logf("cluster back; leader %s", leader.id)
	return nil
}

// poll calls cond every 200 ms until it holds, fails, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
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
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
	}
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leaderMetrics summarises the leader's /metrics in one line, since the
// leader started: reports by result, mean commit and allocation times,
// mean report size, and the keys it divides.
func (c *cluster) leaderMetrics(ctx context.Context) string {
	leader, _ := c.findLeader(ctx)
	if leader == nil {
		return "no leader"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+leader.httpAddr+"/metrics", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	in := bufio.NewScanner(resp.Body)
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		name, labels, v, ok := parseSample(in.Text())
		if !ok {
			continue
		}
		if r := labels["result"]; r != "" {
			name += "/" + r
		}
		m[name] += v
	}
	mean := func(name string, scale float64) float64 {
		if n := m[name+"_count"]; n > 0 {
			return scale * m[name+"_sum"] / n
		}
		return 0
	}
	const p = "allot_coordinator_"
	return fmt.Sprintf("leader %s: reports ok %.0f, failed %.0f, redirected %.0f, invalid %.0f; mean commit %.0f ms, allocation round %.0f ms, report %.0f KiB with %.0f keys; active keys %.0f",
		leader.id, m[p+"reports_total/ok"], m[p+"reports_total/failed"], m[p+"reports_total/redirected"], m[p+"reports_total/invalid"],
		mean(p+"raft_apply_duration_seconds", 1000), mean(p+"allocation_round_duration_seconds", 1000),
		mean(p+"report_size_bytes", 1.0/1024), mean(p+"report_keys", 1), m[p+"active_keys"])
}
