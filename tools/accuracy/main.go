// Command accuracy measures what a real Allot fleet admits against its
// limits: three `allot coordinator` processes and 3 or 10 `allot agent`
// sidecars on loopback, an open-loop load generator counting, per tenant
// per second (per window for a fixed window), what the sidecars admitted;
// and the same traffic through `allot sim`, side by side. docs/accuracy.md
// ("Real processes") describes the scenarios, the figures and the targets.
//
//	go run ./tools/accuracy            # every scenario, 3 and 10 sidecars (make accuracy)
//	go run ./tools/accuracy -help      # every flag
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/allot-io/allot/internal/fleet"
)

// config is one run's settings: the flags.
type config struct {
	allot, workDir string
	binsPath       string
	spread         string
	keep, strict   bool
	fleets         []int
	only           *regexp.Regexp
	timeout        time.Duration
	reportInterval time.Duration
	workers        int
	settings
}

func defaultConfig() config {
	return config{fleets: []int{3, 10}, only: regexp.MustCompile(""), timeout: 14 * time.Minute,
		reportInterval: time.Second, workers: 64,
		settings: settings{steady: 20 * time.Second, warmup: 3 * time.Second, killDown: 3 * time.Second}}
}

func parseFlags(args []string, stderr io.Writer, base config) (config, error) {
	cfg := base
	fs := flag.NewFlagSet("accuracy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fleets, only := joinInts(cfg.fleets), cfg.only.String()
	fs.StringVar(&cfg.allot, "allot", "", "use this allot binary instead of building ./cmd/allot")
	fs.StringVar(&cfg.workDir, "workdir", "", "directory for data and logs (default: a new temporary directory)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep data and logs")
	fs.StringVar(&cfg.binsPath, "bins", "", "also write every key's bins (offered, admitted, denied, failed) to this CSV file")
	fs.StringVar(&cfg.spread, "spread", "round-robin", "how checks are spread over the sidecars: round-robin, or random (each check to a sidecar drawn at random)")
	fs.BoolVar(&cfg.strict, "strict", false, "exit 1 when a target is missed (default: report only)")
	fs.StringVar(&fleets, "sidecars", fleets, "fleet sizes to run, comma-separated")
	fs.StringVar(&only, "scenarios", only, "run only the scenarios whose name matches this regular expression")
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "hard bound on the whole run")
	fs.DurationVar(&cfg.reportInterval, "report-interval", cfg.reportInterval, "coordinators' and agents' --report-interval (and the simulator's interval)")
	fs.IntVar(&cfg.workers, "workers", cfg.workers, "load generator's concurrent requests at most")
	fs.DurationVar(&cfg.steady, "steady", cfg.steady, "load in each steady scenario")
	fs.DurationVar(&cfg.warmup, "warmup", cfg.warmup, "left out of worst and average, from each tenant's first check")
	err := fs.Parse(args)
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		return cfg, err
	}
	re, err := regexp.Compile(only)
	if err != nil {
		return cfg, fmt.Errorf("-scenarios: %w", err)
	}
	cfg.only = re
	cfg.fleets = nil
	for f := range strings.SplitSeq(fleets, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 50 {
			return cfg, fmt.Errorf("-sidecars: %q is not a fleet size from 1 to 50", f)
		}
		cfg.fleets = append(cfg.fleets, n)
	}
	if cfg.spread != "round-robin" && cfg.spread != "random" {
		return cfg, fmt.Errorf("-spread: %q is neither round-robin nor random", cfg.spread)
	}
	if cfg.workers < 1 || cfg.steady <= cfg.warmup {
		return cfg, errors.New("-workers must be positive and -steady longer than -warmup")
	}
	return cfg, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func main() { os.Exit(accuracyMain(os.Args[1:], os.Stdout, os.Stderr)) }

// accuracyMain runs the command and returns its exit status: 2 for bad
// flags, 1 when the run failed or, with -strict, a target was missed.
func accuracyMain(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr, defaultConfig())
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintln(stderr, "accuracy:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rows, err := run(ctx, cfg, stdout)
	fmt.Fprintf(stdout, "\n%s\ntook %.0fs\n", table(rows), time.Since(start).Seconds())
	switch n := missed(rows); {
	case err != nil:
		fmt.Fprintln(stderr, "accuracy:", err)
		return 1
	case cfg.strict && n > 0:
		fmt.Fprintf(stderr, "accuracy: %d targets missed (-strict)\n", n)
		return 1
	}
	return 0
}

// row is one scenario on one fleet: the real figures and the simulator's.
type row struct {
	nodes     int
	s         *scenario
	real, sim figures
	simNote   string // why there is no simulator figure
}

// run builds allot and runs every selected scenario on each fleet size,
// one cluster per size. Every process is stopped before it returns.
func run(ctx context.Context, cfg config, out io.Writer) ([]row, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	dir := cfg.workDir
	if dir == "" {
		d, err := os.MkdirTemp("", "allot-accuracy-")
		if err != nil {
			return nil, fmt.Errorf("making the run's directory: %w", err)
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
	bin := cfg.allot
	if bin == "" {
		logf("building ./cmd/allot into %s", dir)
		var err error
		if bin, err = fleet.BuildAllot(ctx, dir); err != nil {
			return nil, fmt.Errorf("building allot: %w", err)
		}
	}
	var rows []row
	for _, n := range cfg.fleets {
		got, err := runFleet(ctx, cfg, bin, filepath.Join(dir, fmt.Sprintf("fleet-%d", n)), n, logf)
		rows = append(rows, got...)
		if err != nil {
			return rows, fmt.Errorf("%d sidecars: %w", n, err)
		}
	}
	failed = false
	return rows, nil
}

// runFleet starts one cluster with n sidecars and runs the scenarios on it.
func runFleet(ctx context.Context, cfg config, bin, dir string, n int, logf func(string, ...any)) ([]row, error) {
	var todo []*scenario
	var defs []fleet.Rule
	for _, s := range scenarios(cfg.settings, n) {
		if cfg.only.MatchString(s.name) {
			todo = append(todo, s)
			defs = append(defs, s.rule)
		}
	}
	if len(todo) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		return nil, fmt.Errorf("making the log directory: %w", err)
	}
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := fleet.WriteRules(rulesPath, defs); err != nil {
		return nil, err
	}
	cl, err := fleet.New(fleet.Options{Bin: bin, Dir: dir, RulesPath: rulesPath, Sidecars: n, ReportInterval: cfg.reportInterval, Logf: logf})
	if err != nil {
		return nil, err
	}
	defer cl.StopAll()
	logf("starting 3 coordinators and %d sidecars (logs in %s)", n, filepath.Join(dir, "logs"))
	if err := cl.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting the cluster: %w", err)
	}
	gen := newGenerator(cl.Sidecars, cfg.workers)
	gen.random, gen.rnd = cfg.spread == "random", rand.New(rand.NewPCG(uint64(n), 1))
	r := &runner{cl: cl, gen: gen, log: logf}
	var rows []row
	for _, s := range todo {
		logf("%d sidecars: %s (%s %s %d per %s, %.0f checks/s offered)", n, s.name, s.rule.Scope, s.rule.Algorithm, s.rule.Limit, s.rule.Period, s.offeredRate())
		real, err := r.run(ctx, s)
		if err != nil {
			return rows, err
		}
		if cfg.binsPath != "" {
			if err := appendBins(cfg.binsPath, n, s.name, r.gen.counts); err != nil {
				return rows, err
			}
		}
		rw := row{nodes: n, s: s, real: real, simNote: "no comparable built-in"}
		if s.sim != nil {
			rw.simNote = ""
			if rw.sim, err = runSim(ctx, bin, dir, s, n, cfg.reportInterval); err != nil {
				return rows, err
			}
		}
		logf("%s", rw.line())
		rows = append(rows, rw)
	}
	return rows, nil
}
