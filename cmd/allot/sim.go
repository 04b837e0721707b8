package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/allot-io/allot/sim"
)

const simAbout = `
Simulates a fleet of gateways in virtual time and compares strategies on
the same traffic: central (one store round trip per request), even-split
(limit ÷ nodes), quota-lease (Allot) and async-global (Gubernator's
GLOBAL mode). A scenario is a built-in name or a YAML file; flags override
its fleet. The same seed gives the same output, byte for byte.

Built-in scenarios: ` + "%s" + `.
With --out DIR it also writes windows.csv (per window), results.json and
the plots admitted.png and shares.png. docs/accuracy.md explains every
column.`

func simCommand() *Command {
	return &Command{
		Name: "sim", Usage: "--scenario NAME|FILE [flags]",
		Short: "simulate a fleet and compare strategies",
		Long:  fmt.Sprintf(simAbout, strings.Join(sim.Builtins(), ", ")),
		Flags: simFlags,
	}
}

func simFlags(f *flags) runFunc {
	var (
		scenario, strategies, out, format string
		nodes                             int
		rate                              float64
		duration, interval                time.Duration
		seed                              uint64
		progress                          string
	)
	f.StringVar(&scenario, "scenario", "sticky", "built-in scenario name or YAML file")
	f.IntVar(&nodes, "nodes", 0, "gateways in the fleet (0: the scenario's)")
	f.Float64Var(&rate, "rate", 0, "offered requests per second over the fleet (0: the scenario's)")
	f.DurationVar(&duration, "duration", 0, "simulated time (0: the scenario's)")
	f.DurationVar(&interval, "interval", 0, "agents' reporting interval (0: the scenario's)")
	f.Uint64Var(&seed, "seed", 0, "random seed (0: the scenario's)")
	f.StringVar(&strategies, "strategies", "", "strategies to compare, comma-separated: "+strings.Join(sim.StrategyNames(), ", ")+", static-regions for scenarios with regions, and shard-groups, one-group and one-group-unlimited for scenarios with shards (default: all that apply)")
	f.StringVar(&out, "out", "", "directory for windows.csv, results.json and PNG plots")
	f.StringVar(&format, "format", "table", "output on stdout: table, json or csv")
	f.StringVar(&progress, "progress", "auto", "progress on stderr: auto (on a terminal), on or off")
	return func(ctx context.Context, e *env, args []string) error {
		if format != "table" && format != "json" && format != "csv" {
			return usagef("sim", "--format %q: want table, json or csv", format)
		}
		if progress != "auto" && progress != "on" && progress != "off" {
			return usagef("sim", "--progress %q: want auto, on or off", progress)
		}
		s, err := sim.Load(scenario)
		if err != nil {
			return &usageError{err: err}
		}
		if nodes != 0 {
			s.Nodes = nodes
		}
		if rate != 0 {
			s.Rate = rate
		}
		if duration != 0 {
			s.Duration = duration
			s.Warmup = min(s.Warmup, duration/2)
		}
		if interval != 0 {
			s.Interval = interval
		}
		if seed != 0 {
			s.Seed = seed
		}
		opts := sim.Options{Strategies: splitList(strategies)}
		if progress == "on" || (progress == "auto" && isTerminal(e.stderr)) {
			opts.Progress = progressPrinter(e.stderr)
		}
		results, err := sim.Run(ctx, s, opts)
		if opts.Progress != nil {
			fmt.Fprint(e.stderr, "\r\033[K")
		}
		if errors.Is(err, sim.ErrInvalidScenario) {
			return &usageError{err: err, hint: "sim"}
		}
		if err != nil {
			return err
		}
		switch format {
		case "json":
			err = sim.WriteJSON(e.stdout, results)
		case "csv":
			err = sim.WriteCSV(e.stdout, results)
		default:
			err = sim.WriteTable(e.stdout, s, results)
		}
		if err != nil {
			return err
		}
		if out != "" {
			files, err := writeSimFiles(out, s, results)
			if err != nil {
				return err
			}
			if format == "table" {
				fmt.Fprintf(e.stdout, "\nwrote %s\n", strings.Join(files, ", "))
			}
		}
		return nil
	}
}

// writeSimFiles writes a run's CSV, JSON and plots into dir.
func writeSimFiles(dir string, s *sim.Scenario, results []*sim.Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	write := func(name string, fn func(io.Writer) error) error {
		path := filepath.Join(dir, name)
		fh, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := fn(fh); err != nil {
			fh.Close()
			return fmt.Errorf("writing %s: %w", path, err)
		}
		files = append(files, path)
		return fh.Close()
	}
	if err := write("windows.csv", func(w io.Writer) error { return sim.WriteCSV(w, results) }); err != nil {
		return nil, err
	}
	if err := write("results.json", func(w io.Writer) error { return sim.WriteJSON(w, results) }); err != nil {
		return nil, err
	}
	plots, err := sim.WritePlots(dir, s, results)
	if err != nil {
		return nil, err
	}
	return append(files, plots...), nil
}

// progressPrinter shows a run's progress in place, at most ten times a
// second.
func progressPrinter(w io.Writer) func(float64) {
	var mu sync.Mutex
	var last time.Time
	return func(done float64) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(last) >= 100*time.Millisecond || done >= 1 {
			last = now
			fmt.Fprintf(w, "\rsimulating… %3.0f%%", 100*done)
		}
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
