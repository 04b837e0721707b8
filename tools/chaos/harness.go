package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/internal/fleet"
	"github.com/allot-io/allot/ledger"
)

// harness is one run: its directory, log and processes.
type harness struct {
	cfg     config
	out     io.Writer
	log     *phaseLog
	dir     string
	ownDir  bool
	logFile *os.File
	cl      *fleet.Cluster
	bin     string // the allot binary, for its CLI
	passed  bool
	hung    atomic.Bool // a process ignored SIGTERM: its stacks are in its log
	// anomalies are answers the harness could not account for
	anomalies int64
	reports   [3][2]float64 // each sidecar's reports answered and failed, at the last check
	// lostAllowed is how many units the storage phases may lose: those in
	// entries a recovered member never received (see lostQuorum);
	// rlqsAllowed, what the Envoys reported while no member could commit;
	// rlqsUnreceived, what of theirs the lost members had committed in
	// entries the recovered member never received.
	lostAllowed    *big.Int
	rlqsAllowed    uint64
	rlqsUnreceived uint64
	envoys         *envoyLoad
	// tmpfs is set when fullMember's data dir is a small tmpfs, for the
	// full-disk phase.
	tmpfs      bool
	fullMember int
	// soakOK is whether every series of a soak levelled off; exported
	// holds the final windows a soak's billing job read before retention
	// deleted them.
	soakOK   bool
	exported *exportedLines
	// sink is the PostgreSQL the coordinators export the ledger to, nil
	// without one; cluster is the cluster's ID, which its rows carry.
	// sinkProblems are the sink phases' failed expectations, and sinkV
	// the sink's ledger check.
	sink         *sinkDB
	cluster      string
	sinkProblems []string
	sinkV        *sinkVerdict
	once         sync.Once
	// faults are the faults made so far, for the ERROR lines they
	// explain (logcheck.go); logsOK, whether no other was logged.
	faultMu    sync.Mutex
	faultSpans []faultSpan
	logsOK     bool
	// failedBy names each check that failed, in one line each, for the
	// test's own error: a long run's log may reach a reader cut.
	failedBy    []string
	firstBadLog string
}

func newHarness(cfg config, out io.Writer) *harness {
	return &harness{cfg: cfg, out: out, log: &phaseLog{start: time.Now(), out: out}, lostAllowed: new(big.Int)}
}

// close stops every process still running and removes the run's
// directory, unless the run failed or -keep was given: then it says where
// the logs are. It is safe to call more than once.
func (h *harness) close() {
	h.once.Do(func() {
		if h.cl != nil {
			h.cl.StopAll()
		}
		if h.sink != nil {
			if err := h.sink.close(); err != nil {
				fmt.Fprintf(h.out, "stopping PostgreSQL: %v\n", err)
			}
		}
		if h.tmpfs {
			if out, err := exec.Command("umount", h.cl.Coords[h.fullMember].DataDir).CombinedOutput(); err != nil {
				fmt.Fprintf(h.out, "umount %s: %v %s\n", h.cl.Coords[h.fullMember].DataDir, err, out)
			}
		}
		if h.logFile != nil {
			h.logFile.Close()
		}
		switch {
		case h.dir == "":
		case !h.passed || h.cfg.keep || !h.ownDir || h.hung.Load():
			fmt.Fprintf(h.out, "logs and data kept in %s\n", h.dir)
		default:
			os.RemoveAll(h.dir)
		}
	})
}

// run runs every phase and compares the ledger with the answers.
func (h *harness) run(ctx context.Context) (*verdict, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.timeout)
	defer cancel()
	cfg := &h.cfg
	if err := h.setup(ctx); err != nil {
		return nil, err
	}
	rules := newRuleSet(chaosRules())
	client := newClient(h.cl.Sidecars, rules, cfg.workers)
	h.log.logf("traffic: %d workers, %d checks/s, at most %d checks; new tenants at %.0f%% of checks", cfg.workers, cfg.rate, cfg.maxRequests, 100*cfg.newTenantRate)
	ld := startLoad(ctx, cfg, client)
	envoys, err := h.startEnvoys(ctx)
	if err != nil {
		return nil, err
	}
	h.envoys = envoys
	finished := false
	defer func() {
		if !finished {
			ld.finish()
		}
	}()
	var hostile *tally
	if cfg.soak.duration > 0 {
		// The billing job reads until the ledger is settled below.
		h.exported = &exportedLines{}
		ectx, stopExport := context.WithCancel(ctx)
		defer stopExport()
		go h.exportFinals(ectx)
		hostile = newTally(len(h.cl.Sidecars), len(client.rules.defs))
		err = h.soak(ctx)
	} else {
		octx, stopChurn := context.WithCancel(ctx)
		churned := make(chan churnCounts, 1)
		go func() { churned <- h.churnOverrides(octx) }()
		hostile, err = h.faults(ctx, ld, client)
		stopChurn()
		ch := <-churned
		h.log.logf("overrides changed during the faults: %d put, %d deleted, %d calls failed (no leader)", ch.puts, ch.deletes, ch.failed)
	}
	if err != nil {
		return nil, err
	}
	got := ld.finish()
	finished = true
	envoys.stop()
	got.merge(hostile)
	h.log.logf("traffic stopped: %d checks sent, %d new tenants", got.stats.sent, ld.newSeq.Load())
	for _, n := range got.notes {
		h.log.logf("anomaly: %s", n)
	}
	for _, n := range client.errorNotes() {
		h.log.logf("failed check: %s", n)
	}
	client.http.CloseIdleConnections()

	// Let a few cuts pass, so that the sidecars' counters are settled, then
	// read them and stop the sidecars, which flush their usage.
	if err := fleet.Sleep(ctx, 4*cfg.reportInterval); err != nil {
		return nil, err
	}
	counts := make([]*sidecarCounts, len(h.cl.Sidecars))
	for i, s := range h.cl.Sidecars {
		if counts[i], err = scrapeSidecar(ctx, h.cl.HTTP, s); err != nil {
			h.log.logf("%v", err)
		}
	}
	h.stopSidecars()

	led, err := h.settledLedger(ctx, rules)
	if err != nil {
		return nil, err
	}
	if h.sink != nil {
		if h.sinkV, err = h.checkSink(ctx, got, rules, led); err != nil {
			return nil, err
		}
	}
	envoysOK := h.envoyVerdict(envoys, led, rules)
	v := compare(got, led, rules)
	h.report(got, v, rules, counts, envoysOK)
	h.passed, h.anomalies = v.passWithin(h.lostAllowed) && envoysOK && got.stats.anomalies == 0 && (cfg.soak.duration == 0 || h.soakOK) && h.sinkPass(), got.stats.anomalies
	for _, c := range []struct {
		failed bool
		why    string
	}{
		{v.lost.Cmp(h.lostAllowed) > 0, fmt.Sprintf("%s units lost, at most %s allowed", v.lost, h.lostAllowed)},
		{v.double.Sign() != 0, fmt.Sprintf("%s units double-counted", v.double)},
		{got.stats.anomalies > 0, fmt.Sprintf("%d answers the harness could not account for", got.stats.anomalies)},
		{!envoysOK, "the Envoys' (RLQS) ledger check failed"},
		{!h.sinkPass(), fmt.Sprintf("the sink's check failed: %s", strings.Join(h.sinkProblems, "; "))},
		{cfg.soak.duration > 0 && !h.soakOK, "the soak's levels did not level off"},
	} {
		if c.failed {
			h.failedBy = append(h.failedBy, c.why)
		}
	}
	var wg sync.WaitGroup
	defer h.fault("shutdown")() // the members stop together: each sees the others go
	for _, co := range h.cl.Coords {
		wg.Go(func() {
			if err := co.Terminate(10 * time.Second); err != nil {
				if errors.Is(err, fleet.ErrHung) {
					h.hung.Store(true)
				}
				h.log.logf("coordinator %v", err)
			}
		})
	}
	wg.Wait()
	if h.logsOK = h.checkLogs(h.cl.LogPaths()); !h.logsOK {
		h.passed = false
		h.failedBy = append(h.failedBy, "ERROR lines no fault explains, first: "+h.firstBadLog)
		h.log.logf("RESULT: FAIL: the processes logged ERROR lines that no fault of the run explains (above)")
	}
	return v, nil
}

// setup makes the run's directory, builds allot, writes the rules and
// starts the processes.
func (h *harness) setup(ctx context.Context) error {
	cfg := &h.cfg
	h.dir = cfg.workDir
	if h.dir == "" {
		d, err := os.MkdirTemp("", "allot-chaos-")
		if err != nil {
			return fmt.Errorf("making the run's directory: %w", err)
		}
		h.dir, h.ownDir = d, true
	}
	if err := os.MkdirAll(filepath.Join(h.dir, "logs"), 0o700); err != nil {
		return fmt.Errorf("making the log directory: %w", err)
	}
	f, err := os.Create(filepath.Join(h.dir, "logs", "chaos.log"))
	if err != nil {
		return fmt.Errorf("creating the run's log: %w", err)
	}
	h.logFile = f
	h.log.file = f
	bin := cfg.allot
	if bin == "" {
		h.log.logf("building ./cmd/allot into %s", h.dir)
		if bin, err = fleet.BuildAllot(ctx, h.dir); err != nil {
			return err
		}
	}
	h.bin = bin
	rulesPath := filepath.Join(h.dir, "rules.yaml")
	if err := fleet.WriteRules(rulesPath, chaosRules()); err != nil {
		return err
	}
	opts := fleet.Options{Bin: bin, Dir: h.dir, RulesPath: rulesPath, Sidecars: 3,
		ReportInterval: cfg.reportInterval, LeaseTTL: cfg.leaseTTL, BillingWindow: cfg.billingWindow, Logf: h.log.logf,
		Secure: !cfg.insecure, MaxNewNodesPerMinute: forgedNewNodes}
	if cfg.soak.duration > 0 {
		// Ten-second billing windows, final 20 s after they end and
		// deleted a minute after: the ledger reaches its steady state
		// within two, and what still grows after that is a leak. A billing
		// job (exportFinals) keeps the final windows before they go.
		opts.BillingWindow = 10 * time.Second
		opts.CoordinatorArgs = []string{"--agent-timeout", "20s", "--ledger-retention", "1m"}
		if t := cfg.soak.snapshotThreshold; t > 0 {
			opts.SnapshotThreshold, opts.SnapshotInterval = t, 10*time.Second
		}
	}
	if cfg.soak.duration == 0 && cfg.agentTimeout > 0 {
		// Every RLQS stream is a reporter of its own; one whose
		// coordinator was killed never reports again, and the windows it
		// reported in, with every window after them for the sink, wait
		// the agent timeout before they are final.
		opts.CoordinatorArgs = append(opts.CoordinatorArgs, "--agent-timeout", cfg.agentTimeout.String())
	}
	if cfg.storage.damagedSnapshot {
		// Snapshots every few dozen entries, so that a member soon holds
		// two to damage one of.
		opts.SnapshotThreshold, opts.SnapshotInterval = 64, time.Second
	}
	if cfg.sink.on {
		if h.sink, err = h.startSink(ctx); err != nil {
			return err
		}
	}
	if h.sink != nil {
		opts.LedgerSinkFile, opts.LedgerExportBatch, opts.LedgerExportInterval = h.sink.file, cfg.sink.batch, cfg.sink.interval
	}
	h.cl, err = fleet.New(opts)
	if err != nil {
		return err
	}
	if cfg.storage.diskFull {
		h.mountTmpfs()
	}

	h.log.logf("starting 3 coordinators and 3 sidecars (logs in %s)", filepath.Join(h.dir, "logs"))
	if err := h.cl.Start(ctx); err != nil {
		return fmt.Errorf("starting the cluster: %w", err)
	}
	leader, _ := h.cl.FindLeader(ctx)
	if leader != nil {
		h.log.logf("cluster up: leader %s; every sidecar has rules", leader.ID)
	}
	if h.sink != nil {
		if h.cluster, err = h.clusterID(ctx); err != nil {
			return err
		}
		h.log.logf("sink: every coordinator exports to it (--ledger-export-batch %d, --ledger-export-interval %v); cluster ID %s",
			cfg.sink.batch, cfg.sink.interval, h.cluster)
	}
	return nil
}

// mountTmpfs mounts a tmpfs as the first member's data dir, for the
// full-disk phase, when running as root; otherwise that phase is skipped
// and says why.
//
// Its size is what the member needs until that phase, with room to spare:
// under this run's load raft.db keeps the 1,024 entries Raft trails behind
// a snapshot, each a report of 40 to 300 KiB, so it reaches 40 to 300
// MiB; and the corruption phase moves a damaged raft.db aside in the same
// dir, as the runbook does, so two of them may be there at once. A 64 MiB
// tmpfs filled up before the full-disk phase on a slow day, and the member
// could not reopen its log. The full-disk phase fills whatever is left, so
// the size only sets how much filler it writes (in memory, and freed).
func (h *harness) mountTmpfs() {
	const tmpfsMiB = 1024
	dir := h.cl.Coords[h.fullMember].DataDir
	if os.Geteuid() != 0 {
		return
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		h.log.logf("tmpfs for the full-disk phase: %v", err)
		return
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0700", tmpfsMiB), "tmpfs", dir).CombinedOutput(); err != nil {
		h.log.logf("tmpfs for the full-disk phase: mount: %v %s", err, out)
		return
	}
	h.tmpfs = true
	h.log.logf("%s's data dir is a %d MiB tmpfs, for the full-disk phase", h.cl.Coords[h.fullMember].ID, tmpfsMiB)
}

// faults runs the phases while the load runs, and returns what the
// hostile inputs were answered.
func (h *harness) faults(ctx context.Context, ld *load, client *client) (*tally, error) {
	cfg, cl := &h.cfg, h.cl
	phase := func(name string, d time.Duration) error {
		h.checkSidecars(ctx)
		h.log.logf("phase: %s (%v)", name, d)
		if err := fleet.Sleep(ctx, d); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	if err := phase("warmup", cfg.warmup); err != nil {
		return nil, err
	}
	if cfg.flood > 0 {
		h.log.logf("phase: a flood of %d new tenants", cfg.flood)
		end := h.fault("flood")
		start, before := time.Now(), ld.newSeq.Load()
		ld.flood.Store(cfg.flood)
		err := fleet.Poll(ctx, 5*time.Minute, "the flood to pass", func() (bool, error) {
			return ld.flood.Load() <= 0 || ld.budget.Load() < 0, nil
		})
		end()
		if err != nil {
			return nil, err
		}
		h.log.logf("flood: %d new tenants in %.1fs", ld.newSeq.Load()-before, time.Since(start).Seconds())
	}
	for i := range cfg.kills {
		h.log.logf("phase: leader kill %d/%d", i+1, cfg.kills)
		end := h.fault("leader-kill")
		err := cl.KillLeader(ctx, cfg.killDown)
		end()
		if err != nil {
			return nil, fmt.Errorf("leader kill %d: %w", i+1, err)
		}
		if err := phase("traffic after the kill", cfg.killGap); err != nil {
			return nil, err
		}
	}
	for i := range cfg.pauses {
		h.log.logf("phase: leader pause %d/%d", i+1, cfg.pauses)
		end := h.fault("leader-pause")
		err := cl.PauseLeader(ctx, cfg.pause)
		end()
		if err != nil {
			return nil, fmt.Errorf("leader pause %d: %w", i+1, err)
		}
		if err := phase("traffic after the pause", cfg.pauseGap); err != nil {
			return nil, err
		}
	}
	if err := h.sinkPhases(ctx, client, phase); err != nil {
		return nil, err
	}
	if cfg.storage.any() {
		if err := h.storagePhases(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.outage > 0 {
		h.log.logf("phase: full outage")
		end := h.fault("outage")
		err := cl.Outage(ctx, cfg.outage)
		end()
		if err != nil {
			return nil, fmt.Errorf("outage: %w", err)
		}
		if err := phase("traffic after the outage", cfg.outageRecover); err != nil {
			return nil, err
		}
	}
	hostile := newTally(len(cl.Sidecars), len(client.rules.defs))
	if cfg.hostile {
		h.log.logf("phase: hostile input (the over-long tenant to sidecar %d only)", cfg.longTenantSidecar)
		end := h.fault("hostile")
		hostile = sendHostile(ctx, client, cfg.longTenantSidecar, regexp.MustCompile(cfg.hostileOnly), h.log)
		end()
		if cl.Creds != nil {
			h.log.logf("phase: forged reports to the coordinators")
			end := h.fault("forged")
			err := h.forge(ctx)
			end()
			if err != nil {
				return nil, err
			}
		}
	}
	var mark ledger.Position
	if h.sink != nil {
		mark, _ = h.sink.position(ctx, h.cluster)
	}
	if err := phase("cooldown", cfg.cooldown); err != nil {
		return nil, err
	}
	if h.sink != nil {
		h.sinkCatchUp(ctx, mark)
	}
	h.checkSidecars(ctx)
	return hostile, nil
}

// checkSidecars logs any sidecar that is no longer running, and how many
// reports each sent, answered and failed, since the last check.
func (h *harness) checkSidecars(ctx context.Context) {
	var parts []string
	for i, s := range h.cl.Sidecars {
		if !s.Running() {
			h.log.logf("WARNING: sidecar %s is not running (see %s)", s.ID, s.LogPath)
			continue
		}
		sc, err := scrapeSidecar(ctx, h.cl.HTTP, s)
		if err != nil {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s +%.0f/+%.0f", s.ID, sc.reportsOK-h.reports[i][0], sc.reportsBad-h.reports[i][1]))
		h.reports[i] = [2]float64{sc.reportsOK, sc.reportsBad}
	}
	h.log.logf("sidecar reports answered/failed since the last phase: %s", strings.Join(parts, ", "))
	h.log.logf("%s", leaderMetrics(ctx, h.cl, h.sink != nil))
}

// stopSidecars SIGTERMs every sidecar at once and waits for them: each
// reports what it has left before it exits.
func (h *harness) stopSidecars() {
	h.log.logf("SIGTERM to every sidecar; they flush their usage")
	var wg sync.WaitGroup
	for _, s := range h.cl.Sidecars {
		wg.Go(func() {
			start := time.Now()
			err := s.Terminate(30 * time.Second)
			if errors.Is(err, fleet.ErrHung) {
				h.hung.Store(true)
			}
			if err != nil {
				h.log.logf("sidecar %s exited after %.1fs: %v; its log ends: %s", s.ID, time.Since(start).Seconds(), err, lastLine(s.LogPath))
				return
			}
			h.log.logf("sidecar %s exited cleanly after %.1fs", s.ID, time.Since(start).Seconds())
		})
	}
	wg.Wait()
}

// settledLedger reads the ledger until two reads a second apart agree.
func (h *harness) settledLedger(ctx context.Context, rules *ruleSet) (ledgerSums, error) {
	var addrs []string
	leader, _ := h.cl.FindLeader(ctx)
	if leader != nil {
		addrs = append(addrs, leader.GRPC)
	}
	for _, co := range h.cl.Coords {
		if co != leader {
			addrs = append(addrs, co.GRPC)
		}
	}
	var prev ledgerSums
	for range 10 {
		var creds []string
		if h.cl.Creds != nil {
			creds = h.cl.Creds.ClientArgs()
		}
		lines, err := readLedgerLines(ctx, h.cl.Coords[0].Bin, addrs, creds)
		if err != nil {
			return nil, err
		}
		led := sumLines(h.exported.with(lines), rules)
		if prev != nil && led.equal(prev) {
			h.log.logf("ledger read: %d tenant/rule lines", len(led))
			return led, nil
		}
		prev = led
		if err := fleet.Sleep(ctx, time.Second); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("the ledger kept changing after every sidecar stopped")
}

// report prints the mismatches, the sidecars' own counts where they
// differ, and the summary.
func (h *harness) report(got *tally, v *verdict, rules *ruleSet, counts []*sidecarCounts, envoysOK bool) {
	var b strings.Builder
	if err := printMismatches(&b, v, h.cfg.maxLines, mismatchPath(filepath.Join(h.dir, "logs"))); err != nil {
		fmt.Fprintln(&b, err)
	}
	fmt.Fprintln(&b, "What each sidecar answered, against its own counters (allot_agent_decisions_total), where they differ:")
	printSidecarCheck(&b, got, rules, h.cl.Sidecars, counts)
	s := got.stats
	fmt.Fprintf(&b, "SUMMARY requests: sent %d, admitted %d (%d reserved and settled), denied %d, refused as malformed %d, errors %d, anomalies %d\n",
		s.sent, s.admitted, s.settles, s.denied, s.rejected, s.errors, s.anomalies)
	fmt.Fprintf(&b, "SUMMARY units answered: admitted %s, denied %s; in the ledger: admitted %s, denied %s\n", v.genAdm, v.genDen, v.ledAdm, v.ledDen)
	fmt.Fprintf(&b, "SUMMARY tenant/rule lines: %d, mismatching %d (%d lines short in %d tenants, %d lines over in %d tenants)\n",
		v.lines, len(v.mismatches), v.lostLines, v.lostTenants, v.doubleLines, v.doubleTenants)
	fmt.Fprintf(&b, "SUMMARY lost units: %s, double-counted units: %s\n", v.lost, v.double)
	if h.lostAllowed.Sign() > 0 {
		fmt.Fprintf(&b, "SUMMARY units the lost quorum may have lost (in entries the recovered member never received): at most %s\n", h.lostAllowed)
	}
	if h.sinkV != nil {
		h.sinkV.print(&b, h.cfg.maxLines, filepath.Join(h.dir, "logs"), h.lostAllowed, h.sinkProblems)
	}
	result := "PASS"
	if !v.passWithin(h.lostAllowed) || s.anomalies > 0 || !envoysOK || !h.sinkPass() || h.cfg.soak.duration > 0 && !h.soakOK {
		result = "FAIL"
	}
	fmt.Fprintf(&b, "RESULT: %s\n", result)
	h.log.printf("%s", b.String())
}

// lastLine is the last non-empty line of a file, for error messages.
func lastLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var last string
	in := bufio.NewScanner(f)
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		if t := strings.TrimSpace(in.Text()); t != "" {
			last = t
		}
	}
	return clip(last, 300)
}

// sinkPass is whether the sink's check passed and every sink phase held
// (true without a sink).
func (h *harness) sinkPass() bool {
	if h.sinkV == nil {
		return len(h.sinkProblems) == 0
	}
	return h.sinkV.pass(h.lostAllowed, h.sinkProblems)
}

// leaderMetrics summarises the leader's /metrics in one line, since the
// leader started: reports by result, mean commit and allocation times,
// mean report size, the keys it divides, and with a sink, the export's
// lines, backlog, lag and errors.
func leaderMetrics(ctx context.Context, c *fleet.Cluster, sink bool) string {
	leader, _ := c.FindLeader(ctx)
	if leader == nil {
		return "no leader"
	}
	m, err := coordinatorMetrics(ctx, c, leader)
	if err != nil {
		return err.Error()
	}
	mean := func(name string, scale float64) float64 {
		if n := m[name+"_count"]; n > 0 {
			return scale * m[name+"_sum"] / n
		}
		return 0
	}
	const p = "allot_coordinator_"
	line := fmt.Sprintf("leader %s: reports ok %.0f, failed %.0f, redirected %.0f, invalid %.0f; mean commit %.0f ms, allocation round %.0f ms, report %.0f KiB with %.0f keys; active keys %.0f",
		leader.ID, m[p+"reports_total/ok"], m[p+"reports_total/failed"], m[p+"reports_total/redirected"], m[p+"reports_total/invalid"],
		mean(p+"raft_apply_duration_seconds", 1000), mean(p+"allocation_round_duration_seconds", 1000),
		mean(p+"report_size_bytes", 1.0/1024), mean(p+"report_keys", 1), m[p+"active_keys"])
	if sink {
		line += "; " + sinkLine(m)
	}
	return line
}
