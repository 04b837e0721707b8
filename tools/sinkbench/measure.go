package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/internal/fleet"
	"github.com/allot-io/allot/internal/loopback"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// sample is the coordinator at one time.
type sample struct {
	at                   time.Duration
	acked, exported      int64 // lines
	rss, heap            float64
	pending, ledgerLines float64
}

// result is one run: the samples, and the intake and export rates.
type result struct {
	sink    bool
	samples []sample
	// intake is lines acknowledged per second over the loaded part of the
	// run; export lines committed to the sink per second while loaded.
	intake, export float64
	// idle is the coordinator before any load; drained after the load
	// stopped and the sink took every final line (sink runs only).
	idle, drained sample
	elapsed       time.Duration
	// drain is lines exported per second from the end of the load until
	// none waited (or the drain timed out): the export's speed with no
	// intake beside it, when a backlog was left to measure it on (0
	// otherwise).
	drain float64
}

// measure runs one coordinator: with dsn, exporting to it until
// cfg.lines are exported; without, for cfg.baseline.
func measure(ctx context.Context, cfg config, bin, dir, dsn string, out io.Writer) (*result, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := loopback.Ports(3)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i])) }
	grpcAddr, httpAddr, raftAddr := addr(0), addr(1), addr(2)
	args := []string{"coordinator", "--node-id", "c1", "--data-dir", filepath.Join(dir, "data"), "--bootstrap",
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--raft-addr", raftAddr,
		"--billing-window", "1s", "--agent-timeout", "3s",
		"--max-report-keys", strconv.Itoa(cfg.tenants * cfg.rules)}
	name := "baseline"
	if dsn == "" {
		// Without a sink the ledger keeps 30 s of lines: enough for the
		// intake, bounded for a long run.
		args = append(args, "--ledger-retention", "30s")
	} else {
		name = "sink"
		file := filepath.Join(dir, "dsn")
		if err := os.WriteFile(file, []byte(dsn+"\n"), 0o600); err != nil {
			return nil, err
		}
		// With one, retention is the bound on what waits for it: an hour,
		// never reached here (dropped lines would show in the metrics).
		args = append(args, "--ledger-retention", "1h", "--ledger-sink-file", file, "--ledger-export-batch", strconv.Itoa(cfg.batch), "--ledger-export-interval", "200ms")
		if cfg.parallel > 0 {
			args = append(args, "--ledger-export-parallel", strconv.Itoa(cfg.parallel))
		}
	}
	p := &fleet.Proc{Name: name, Bin: bin, Args: args, LogPath: filepath.Join(dir, "coordinator.log")}
	if err := p.Start(); err != nil {
		return nil, err
	}
	defer p.Terminate(30 * time.Second)
	mon := &monitor{pid: p.PID(), url: "http://" + httpAddr + "/metrics"}
	if err := mon.waitReady(ctx, "http://"+httpAddr+"/readyz"); err != nil {
		return nil, fmt.Errorf("the coordinator did not become ready (log %s): %w", p.LogPath, err)
	}
	res := &result{sink: dsn != ""}
	start := time.Now()
	idle, err := mon.sample(0, 0)
	if err != nil {
		return nil, err
	}
	res.idle = idle
	gen, err := newGenerator(grpcAddr, cfg)
	if err != nil {
		return nil, err
	}
	defer gen.close()
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); gen.run(loadCtx) }()
	tick := time.NewTicker(cfg.sample)
	defer tick.Stop()
	fmt.Fprintf(out, "%-8s %8s %12s %12s %9s %9s %10s %10s\n", name, "elapsed", "acked", "exported", "RSS MiB", "heap MiB", "pending", "in memory")
	done := func(s sample) bool {
		if dsn == "" {
			return s.at >= cfg.baseline
		}
		return s.exported >= cfg.lines
	}
	for {
		select {
		case <-ctx.Done():
			stopLoad()
			wg.Wait()
			return nil, ctx.Err()
		case <-tick.C:
		}
		if err := p.UnexpectedExit(); err != nil {
			stopLoad()
			wg.Wait()
			return nil, fmt.Errorf("the coordinator exited: %w (log %s)", err, p.LogPath)
		}
		s, err := mon.sample(time.Since(start), gen.acked.Load())
		if err != nil {
			stopLoad()
			wg.Wait()
			return nil, err
		}
		res.samples = append(res.samples, s)
		printSample(out, name, s)
		if done(s) {
			break
		}
	}
	stopLoad()
	wg.Wait()
	last := res.samples[len(res.samples)-1]
	res.elapsed = last.at
	res.intake = rate(res.samples, func(s sample) int64 { return s.acked })
	res.export = rate(res.samples, func(s sample) int64 { return s.exported })
	if dsn != "" {
		stopped := last
		if s, err := mon.sample(time.Since(start), gen.acked.Load()); err == nil {
			stopped = s
		}
		deadline := time.Now().Add(cfg.drainTimeout)
		for time.Now().Before(deadline) {
			s, err := mon.sample(time.Since(start), gen.acked.Load())
			if err != nil {
				return nil, err
			}
			res.drained = s
			if s.ledgerLines == 0 {
				break
			}
			time.Sleep(time.Second)
		}
		printSample(out, "drained", res.drained)
		// A backlog of a few batches drains in less than a sample's
		// precision: only a larger one gives a rate.
		if d := res.drained; d.exported-stopped.exported >= 10*int64(cfg.batch) {
			res.drain = float64(d.exported-stopped.exported) / (d.at - stopped.at).Seconds()
		}
	}
	fmt.Fprintln(out)
	return res, nil
}

// rate is the slope of v over the samples after the first tenth of the
// run (the warm-up), per second.
func rate(ss []sample, v func(sample) int64) float64 {
	if len(ss) < 2 {
		return 0
	}
	first := ss[len(ss)/10]
	last := ss[len(ss)-1]
	if last.at <= first.at {
		return 0
	}
	return float64(v(last)-v(first)) / (last.at - first.at).Seconds()
}

func printSample(out io.Writer, name string, s sample) {
	fmt.Fprintf(out, "%-8s %7.0fs %12d %12d %9.0f %9.0f %10.0f %10.0f\n", name, s.at.Seconds(), s.acked, s.exported, s.rss/(1<<20), s.heap/(1<<20), s.pending, s.ledgerLines)
}

// monitor samples one coordinator process: /proc for its memory, its
// /metrics for the rest.
type monitor struct {
	pid int
	url string
}

func (m *monitor) waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("not ready after 30s")
}

func (m *monitor) sample(at time.Duration, acked int64) (sample, error) {
	s := sample{at: at, acked: acked}
	rss, err := vmRSS(m.pid)
	if err != nil {
		return s, err
	}
	s.rss = rss
	metrics, err := scrape(m.url)
	if err != nil {
		return s, err
	}
	s.heap = metrics["go_memstats_heap_inuse_bytes"]
	s.exported = int64(metrics["allot_coordinator_ledger_exported_lines_total"])
	s.pending = metrics["allot_coordinator_ledger_export_pending_lines"]
	s.ledgerLines = metrics["allot_coordinator_ledger_records"]
	return s, nil
}

// vmRSS is a process's resident memory in bytes.
func vmRSS(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// scrape reads the unlabelled series of a /metrics page.
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.Contains(line, "{") {
			continue
		}
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[name] = f
		}
	}
	return out, sc.Err()
}

// generator reports a line for every tenant × rule in every one-second
// window, split among agents, and counts the lines acknowledged.
type generator struct {
	cfg   config
	cc    *grpc.ClientConn
	acked atomic.Int64
}

func newGenerator(addr string, cfg config) (*generator, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return nil, err
	}
	return &generator{cfg: cfg, cc: cc}, nil
}

func (g *generator) close() { g.cc.Close() }

func (g *generator) run(ctx context.Context) {
	var wg sync.WaitGroup
	per := g.cfg.tenants / g.cfg.agents
	for a := range g.cfg.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.agent(ctx, a, a*per, per)
		}()
	}
	wg.Wait()
}

// agent reports, once per window, one count for each of its tenants ×
// rules, retrying a batch until it is acknowledged.
func (g *generator) agent(ctx context.Context, id, first, n int) {
	client := allotpb.NewAgentServiceClient(g.cc)
	node := fmt.Sprintf("bench-%d", id)
	inc := uint64(time.Now().UnixNano())
	var seq uint64
	for ctx.Err() == nil {
		now := time.Now()
		seq++
		batch := &allotpb.UsageBatch{Seq: seq, CutUnixNano: now.UnixNano(), Counts: make([]*allotpb.UsageCount, 0, n*g.cfg.rules)}
		for t := first; t < first+n; t++ {
			tenant := fmt.Sprintf("tenant-%06d", t)
			for r := range g.cfg.rules {
				batch.Counts = append(batch.Counts, &allotpb.UsageCount{Rule: fmt.Sprintf("rule-%d", r), Tenant: tenant, WindowUnix: now.Unix(), Admitted: 1 + uint64(t%7), Denied: uint64(r)})
			}
		}
		for ctx.Err() == nil {
			req := &allotpb.ReportRequest{Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: node, Incarnation: inc, Region: "default",
				IntervalNano: int64(time.Second), Usage: batch, SentUnixNano: time.Now().UnixNano()}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err := client.Report(cctx, req)
			cancel()
			if err == nil && resp.GetAckedSeq() >= seq {
				g.acked.Add(int64(len(batch.Counts)))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The next window: one report per agent per window.
		next := now.Truncate(time.Second).Add(time.Second)
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
	}
}

// report prints the comparison of the two runs.
func report(out io.Writer, cfg config, base, sunk *result) {
	fmt.Fprintln(out, "result")
	fmt.Fprintf(out, "  intake without a sink   %10.0f lines/s (over %.0fs)\n", base.intake, base.elapsed.Seconds())
	fmt.Fprintf(out, "  intake with the sink    %10.0f lines/s (over %.0fs): %.2f× the baseline\n", sunk.intake, sunk.elapsed.Seconds(), sunk.intake/math.Max(base.intake, 1))
	fmt.Fprintf(out, "  export to PostgreSQL    %10.0f lines/s sustained, %d lines in all\n", sunk.export, sunk.drained.exported)
	if sunk.drain > 0 {
		how := "drained"
		if sunk.drained.ledgerLines > 0 {
			how = "not drained"
		}
		fmt.Fprintf(out, "  export after the load   %10.0f lines/s, the backlog %s in %.0fs\n", sunk.drain, how, (sunk.drained.at - sunk.elapsed).Seconds())
	}
	first := firstAfter(sunk.samples, 1_000_000)
	last := sunk.samples[len(sunk.samples)-1]
	fmt.Fprintf(out, "  coordinator RSS idle    %7.0f MiB (heap %.0f MiB)\n", sunk.idle.rss/(1<<20), sunk.idle.heap/(1<<20))
	fmt.Fprintf(out, "  RSS at %5.1f M exported %7.0f MiB (heap %.0f MiB)\n", float64(first.exported)/1e6, first.rss/(1<<20), first.heap/(1<<20))
	fmt.Fprintf(out, "  RSS at %5.1f M exported %7.0f MiB (heap %.0f MiB): %+.1f%%\n", float64(last.exported)/1e6, last.rss/(1<<20), last.heap/(1<<20), 100*(last.rss/first.rss-1))
	fmt.Fprintf(out, "  RSS drained             %7.0f MiB (heap %.0f MiB), %0.f lines in memory\n", sunk.drained.rss/(1<<20), sunk.drained.heap/(1<<20), sunk.drained.ledgerLines)
	fmt.Fprintf(out, "  baseline RSS at the end %7.0f MiB with retention 30 s (heap %.0f MiB)\n", base.samples[len(base.samples)-1].rss/(1<<20), base.samples[len(base.samples)-1].heap/(1<<20))
}

func firstAfter(ss []sample, exported int64) sample {
	for _, s := range ss {
		if s.exported >= exported {
			return s
		}
	}
	return ss[0]
}
