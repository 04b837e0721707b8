// Command fleetload measures the coordinators at the design's fleet size
// (issue 41): three real `allot coordinator` processes and N gateways,
// each a real agent.Agent in this process with connections of its own,
// reporting over gRPC every second; T tenants Zipf-spread over the
// gateways by a least-connections balancer; four rules (global capacity
// by tenant class, a tenant quota per minute, a per-user GCRA, a route
// quota). Every 10 s it prints a line: reports answered within the
// interval, report latency, shed reports, the leader's CPU, memory,
// goroutines and allocation rounds, lease expiries at the agents, and
// checks offered, admitted and refused by rule. At the end, a summary
// against the targets. A sweep prints one line per (N, T).
// docs/coordinator.md ("Measuring a fleet") says how to read it.
//
//	go run ./tools/fleetload                     # 100 × 2,000 for 30 minutes (make fleet)
//	go run ./tools/fleetload -sweep              # N × T, 90 s each (make fleet-sweep)
//	go run ./tools/fleetload -overload 3         # 3× the gateways for 2 minutes, then back
//	go run ./tools/fleetload -help               # every flag
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/allot-io/allot/internal/fleet"
)

// config is a run's settings: the flags.
type config struct {
	point
	allot, workDir string
	keep, strict   bool
	verbose        bool
	timeout        time.Duration
	sweep          bool
	sweepN, sweepT []int
	sweepDuration  time.Duration
	sweepWarmup    time.Duration
	procs          int
}

func defaultConfig() config {
	return config{
		point: point{shape: shape{gateways: 100, tenants: 2000, rate: 1000, zipf: 1.1, minUsers: 50, maxUsers: 500, routes: 20,
			connRate: 50, batch: 0.1, headroom: 2},
			duration: 30 * time.Minute, warmup: 30 * time.Second, every: 10 * time.Second, reportInterval: time.Second,
			workers: 4, seed: 1, overloadAt: 2 * time.Minute, overloadFor: 2 * time.Minute},
		sweepN: []int{20, 50, 100, 200}, sweepT: []int{500, 2000, 10000},
		sweepDuration: 90 * time.Second, sweepWarmup: 30 * time.Second,
	}
}

func parseFlags(args []string, stderr io.Writer, base config) (config, error) {
	cfg := base
	fs := flag.NewFlagSet("fleetload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sweepN, sweepT := joinInts(cfg.sweepN), joinInts(cfg.sweepT)
	fs.IntVar(&cfg.gateways, "gateways", cfg.gateways, "N: simulated gateways, each a real agent.Agent")
	fs.IntVar(&cfg.tenants, "tenants", cfg.tenants, "T: tenants, Zipf-spread over the gateways")
	fs.Float64Var(&cfg.rate, "rate", cfg.rate, "checks/s each gateway offers (open loop)")
	fs.DurationVar(&cfg.duration, "duration", cfg.duration, "how long the load runs")
	fs.DurationVar(&cfg.warmup, "warmup", cfg.warmup, "left out of the summary, from the load's start")
	fs.DurationVar(&cfg.every, "every", cfg.every, "a line this often")
	fs.DurationVar(&cfg.reportInterval, "report-interval", cfg.reportInterval, "the coordinators' and agents' report interval")
	fs.IntVar(&cfg.workers, "workers", cfg.workers, "goroutines generating the checks")
	fs.IntVar(&cfg.procs, "procs", 0, "GOMAXPROCS of the harness alone (the agents and the load), leaving the rest of the machine to the coordinators; 0: every core")
	fs.Uint64Var(&cfg.seed, "seed", cfg.seed, "seed of the checks' draws")
	fs.Float64Var(&cfg.zipf, "zipf", cfg.zipf, "Zipf exponent of tenants', users' and routes' popularity")
	fs.IntVar(&cfg.minUsers, "min-users", cfg.minUsers, "users of the lightest tenants")
	fs.IntVar(&cfg.maxUsers, "max-users", cfg.maxUsers, "users of the heaviest tenant")
	fs.IntVar(&cfg.routes, "routes", cfg.routes, "routes")
	fs.Float64Var(&cfg.connRate, "conn-rate", cfg.connRate, "checks/s one client connection carries: a tenant opens one per this much traffic, the balancer places each")
	fs.Float64Var(&cfg.batch, "batch", cfg.batch, "fraction of checks at batch priority")
	fs.Float64Var(&cfg.headroom, "headroom", cfg.headroom, "every limit but the binding tenants' quotas is this many times the heaviest key's traffic")
	fs.BoolVar(&cfg.secure, "secure", false, "run the cluster secured (TLS, an agent token), as deployed")
	fs.Float64Var(&cfg.overload, "overload", 0, "from -overload-at, run this many times the gateways (each with its own traffic) for -overload-for, then drop back; 0: off")
	fs.DurationVar(&cfg.overloadAt, "overload-at", cfg.overloadAt, "when the overload starts, from the load's start")
	fs.DurationVar(&cfg.overloadFor, "overload-for", cfg.overloadFor, "how long the overload lasts")
	fs.BoolVar(&cfg.sweep, "sweep", false, "run every (N, T) of -sweep-gateways × -sweep-tenants, a fresh cluster each, and print one line per point")
	fs.StringVar(&sweepN, "sweep-gateways", sweepN, "the sweep's N")
	fs.StringVar(&sweepT, "sweep-tenants", sweepT, "the sweep's T")
	fs.DurationVar(&cfg.sweepDuration, "sweep-duration", cfg.sweepDuration, "load per sweep point")
	fs.DurationVar(&cfg.sweepWarmup, "sweep-warmup", cfg.sweepWarmup, "warm-up per sweep point, left out of its line")
	fs.StringVar(&cfg.allot, "allot", "", "use this allot binary instead of building ./cmd/allot")
	fs.StringVar(&cfg.workDir, "workdir", "", "directory for data and logs (default: a new temporary directory)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep data and logs")
	fs.BoolVar(&cfg.strict, "strict", false, "exit 1 when a target is missed (default: report only)")
	fs.BoolVar(&cfg.verbose, "v", false, "with -sweep, print every point's lines and summary too")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "hard bound on the whole run (default: the runs' length plus 10 minutes)")
	err := fs.Parse(args)
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		return cfg, err
	}
	if cfg.sweepN, err = parseInts(sweepN); err != nil {
		return cfg, fmt.Errorf("-sweep-gateways: %w", err)
	}
	if cfg.sweepT, err = parseInts(sweepT); err != nil {
		return cfg, fmt.Errorf("-sweep-tenants: %w", err)
	}
	switch {
	case cfg.every <= 0 || cfg.reportInterval < 10*time.Millisecond:
		return cfg, errors.New("-every must be positive and -report-interval at least 10ms")
	case cfg.workers < 1 || cfg.procs < 0:
		return cfg, errors.New("-workers must be at least 1, and -procs not negative")
	case !cfg.sweep && cfg.duration <= cfg.warmup:
		return cfg, fmt.Errorf("-duration %v must be longer than -warmup %v", cfg.duration, cfg.warmup)
	case cfg.sweep && cfg.sweepDuration <= cfg.sweepWarmup:
		return cfg, fmt.Errorf("-sweep-duration %v must be longer than -sweep-warmup %v", cfg.sweepDuration, cfg.sweepWarmup)
	case cfg.overload != 0 && (cfg.overload <= 1 || cfg.overloadFor <= 0 || cfg.overloadAt+cfg.overloadFor >= cfg.duration):
		return cfg, errors.New("-overload must be above 1, and -overload-at plus -overload-for within -duration")
	}
	if _, err := newModel(cfg.shape); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func main() { os.Exit(fleetMain(os.Args[1:], os.Stdout, os.Stderr)) }

// fleetMain runs the command and returns its exit status: 2 for bad
// flags, 1 when the run failed or, with -strict, a target was missed.
func fleetMain(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr, defaultConfig())
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintln(stderr, "fleetload:", err)
		return 2
	}
	if cfg.procs > 0 {
		runtime.GOMAXPROCS(cfg.procs)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, pass, err := run(ctx, cfg, stdout)
	switch {
	case err != nil:
		fmt.Fprintln(stderr, "fleetload:", err)
		return 1
	case cfg.strict && !pass:
		fmt.Fprintln(stderr, "fleetload: a target was missed (-strict)")
		return 1
	}
	return 0
}

// points are the runs the config asks for.
func (cfg config) points() []point {
	if !cfg.sweep {
		return []point{cfg.point}
	}
	var out []point
	for _, n := range cfg.sweepN {
		for _, t := range cfg.sweepT {
			p := cfg.point
			p.gateways, p.tenants, p.duration, p.warmup = n, t, cfg.sweepDuration, cfg.sweepWarmup
			p.overload = 0
			out = append(out, p)
		}
	}
	return out
}

// run builds allot and runs every point, each on a fresh cluster. It
// returns what each measured and whether every target was met. Every
// process is stopped before it returns.
func run(ctx context.Context, cfg config, out io.Writer) ([]*result, bool, error) {
	points := cfg.points()
	timeout := cfg.timeout
	if timeout <= 0 {
		for _, p := range points {
			timeout += p.duration + 90*time.Second // start and stop
		}
		timeout += 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dir := cfg.workDir
	if dir == "" {
		d, err := os.MkdirTemp("", "allot-fleet-")
		if err != nil {
			return nil, false, fmt.Errorf("making the run's directory: %w", err)
		}
		dir = d
	}
	started := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(out, "[%6.1fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
	failed := true
	defer func() {
		if failed || cfg.keep || cfg.workDir != "" {
			logf("logs and data kept in %s", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	logf("fleetload on %d cores (GOMAXPROCS %d), everything on this machine: the coordinators, the agents and the load", runtime.NumCPU(), runtime.GOMAXPROCS(0))
	bin := cfg.allot
	if bin == "" {
		logf("building ./cmd/allot into %s", dir)
		var err error
		if bin, err = fleet.BuildAllot(ctx, dir); err != nil {
			return nil, false, fmt.Errorf("building allot: %w", err)
		}
	}
	pass := true
	var rows []string
	var results []*result
	for i, p := range points {
		if cfg.sweep {
			logf("sweep point %d of %d: N=%d, T=%d, %v (the first %v warm-up)", i+1, len(points), p.gateways, p.tenants, p.duration, p.warmup)
		}
		res, err := runPoint(ctx, bin, filepath.Join(dir, fmt.Sprintf("n%d-t%d", p.gateways, p.tenants)), p, out, !cfg.sweep || cfg.verbose, logf)
		if res != nil {
			results = append(results, res)
		}
		if res != nil && len(res.lines) > 0 {
			summary := out
			if cfg.sweep && !cfg.verbose {
				summary = io.Discard // a sweep prints its table; -v each point's summary too
			}
			if !res.printSummary(summary) {
				pass = false
			}
			if cfg.sweep {
				rows = append(rows, res.sweepRow())
				fmt.Fprintf(out, "\n%s\n%s\n", sweepHeader(), rows[len(rows)-1])
			}
		}
		if err != nil {
			return results, false, fmt.Errorf("%d gateways × %d tenants: %w", p.gateways, p.tenants, err)
		}
	}
	if cfg.sweep {
		fmt.Fprintf(out, "\nSWEEP (each point %v, the first %v left out)\n%s\n%s\n", cfg.sweepDuration, cfg.sweepWarmup, sweepHeader(), strings.Join(rows, "\n"))
	}
	fmt.Fprintf(out, "took %.0fs\n", time.Since(started).Seconds())
	failed = false
	return results, pass, nil
}
