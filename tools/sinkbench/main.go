// Command sinkbench measures the ledger sink as an operator would size it:
// a real `allot coordinator` process fed usage lines over gRPC as fast as
// it takes them, first without a sink (the baseline), then exporting to a
// real PostgreSQL started for the run. In one run it reports the
// coordinator's intake of lines with and without the sink, the sink's
// sustained export rate under that intake and, when a backlog is left
// once the load stops, its rate with no intake beside it, and the
// coordinator's memory as the exported lines add up: with a sink it must
// stay where it started, whatever the number of lines.
//
//	go run ./tools/sinkbench                 # 20 M lines (make bench-sink)
//	go run ./tools/sinkbench -lines 2000000  # a quicker look
//
// Every billing window is one second, and every tenant × rule has a line
// in every window, so the lines per second the load generator gets
// acknowledged are the ledger's intake.
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
	"syscall"
	"time"

	"github.com/allot-io/allot/internal/fleet"
	"github.com/allot-io/allot/internal/pgserver"
)

type config struct {
	allot, dir   string
	keep         bool
	lines        int64
	baseline     time.Duration
	tenants      int
	rules        int
	agents       int
	batch        int
	parallel     int
	sample       time.Duration
	drainTimeout time.Duration
}

func main() {
	cfg := config{}
	fs := flag.NewFlagSet("sinkbench", flag.ContinueOnError)
	fs.StringVar(&cfg.allot, "allot", "", "use this allot binary instead of building ./cmd/allot")
	fs.StringVar(&cfg.dir, "workdir", "", "directory for data and logs (default: a new temporary directory, removed after)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the work directory")
	fs.Int64Var(&cfg.lines, "lines", 20_000_000, "lines to export through the sink")
	fs.DurationVar(&cfg.baseline, "baseline", 40*time.Second, "how long to feed the coordinator without a sink, for the baseline intake")
	fs.IntVar(&cfg.tenants, "tenants", 25_000, "tenants with usage in every window")
	fs.IntVar(&cfg.rules, "rules", 4, "rules per tenant")
	fs.IntVar(&cfg.agents, "agents", 4, "agents reporting, each for its share of the tenants")
	fs.IntVar(&cfg.batch, "export-batch", 10_000, "the coordinator's --ledger-export-batch")
	fs.IntVar(&cfg.parallel, "export-parallel", 0, "the coordinator's --ledger-export-parallel (0: its default)")
	fs.DurationVar(&cfg.sample, "sample", 5*time.Second, "how often the coordinator is sampled")
	fs.DurationVar(&cfg.drainTimeout, "drain-timeout", 5*time.Minute, "how long the sink may take to catch up after the load stops")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sinkbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.tenants < cfg.agents || cfg.agents < 1 || cfg.rules < 1 || cfg.lines < 1 {
		return errors.New("-tenants must be at least -agents, and -agents, -rules and -lines positive")
	}
	if err := pgserver.Available(); err != nil {
		return err
	}
	dir := cfg.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "sinkbench-")
		if err != nil {
			return err
		}
		dir = d
		if !cfg.keep {
			defer os.RemoveAll(dir)
		}
	}
	bin := cfg.allot
	if bin == "" {
		fmt.Fprintln(out, "building ./cmd/allot")
		b, err := fleet.BuildAllot(ctx, dir)
		if err != nil {
			return err
		}
		bin = b
	}
	pgDir := filepath.Join(dir, "pg")
	if err := os.MkdirAll(pgDir, 0o755); err != nil {
		return err
	}
	pg, err := pgserver.Start(ctx, pgserver.Options{Dir: pgDir})
	if err != nil {
		return err
	}
	defer pg.Close()
	dsn, err := pg.CreateDatabase(ctx, "allot")
	if err != nil {
		return err
	}
	perWindow := int64(cfg.tenants * cfg.rules)
	fmt.Fprintf(out, "%d tenants × %d rules: %d lines per one-second window, %d agents; PostgreSQL %s (fsync on)\n\n",
		cfg.tenants, cfg.rules, perWindow, cfg.agents, pg.DSN("allot"))

	base, err := measure(ctx, cfg, bin, filepath.Join(dir, "baseline"), "", out)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	sunk, err := measure(ctx, cfg, bin, filepath.Join(dir, "sink"), dsn, out)
	if err != nil {
		return fmt.Errorf("with the sink: %w", err)
	}
	report(out, cfg, base, sunk)
	return nil
}
