package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stepsFlag collects -step name=seconds.
type stepsFlag []step

type step struct {
	name string
	secs float64
}

func (s *stepsFlag) String() string { return fmt.Sprint(*s) }

func (s *stepsFlag) Set(v string) error {
	name, secs, ok := strings.Cut(v, "=")
	f, err := strconv.ParseFloat(strings.TrimSpace(secs), 64)
	if !ok || name == "" || err != nil || f < 0 {
		return fmt.Errorf("want NAME=SECONDS, got %q", v)
	}
	*s = append(*s, step{name, f})
	return nil
}

// runsFlag collects -run 'go test …': each one command, split on spaces.
type runsFlag [][]string

func (r *runsFlag) String() string { return fmt.Sprint(*r) }

func (r *runsFlag) Set(v string) error {
	args := strings.Fields(v)
	if len(args) == 0 {
		return errors.New("an empty command")
	}
	*r = append(*r, args)
	return nil
}

func main() {
	var (
		steps   stepsFlag
		runs    runsFlag
		jsonOut = flag.String("json", "", "also write every go test event to this file")
		repeat  = flag.Bool("repeat", false, "report per test how many of its runs failed (make test-repeat)")
		slowest = flag.Int("slowest", 15, "how many of the slowest tests to list")
	)
	flag.Var(&steps, "step", "a step before the tests and its time, NAME=SECONDS (repeatable)")
	flag.Var(&runs, "run", "a go test command to run, which must pass -json (repeatable; run in order)")
	flag.Parse()
	if len(runs) == 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: testreport [-step NAME=SECONDS]... [-json FILE] [-repeat] -run 'go test -json …'...")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var raw io.Writer = io.Discard
	if *jsonOut != "" {
		f, err := os.Create(*jsonOut)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(1)
		}
		defer f.Close()
		raw = f
	}
	rep := newReport(os.Stdout)
	ok := true
	for _, args := range runs {
		start := time.Now()
		err := runOne(ctx, args, rep, raw)
		rep.walls = append(rep.walls, step{strings.Join(args, " "), time.Since(start).Seconds()})
		if err != nil {
			fmt.Fprintf(os.Stdout, "testreport: %s: %v\n", strings.Join(args, " "), err)
			ok = false
		}
	}
	rep.summary(steps, *slowest, *repeat)
	if !ok || rep.failed() {
		os.Exit(1)
	}
}

// runOne runs one go test command, feeding its events to rep as they
// come; its standard error goes straight through.
func runOne(ctx context.Context, args []string, rep *report, raw io.Writer) error {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	// go test stops its own test binaries on an interrupt; a hung one is
	// killed after a grace.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		raw.Write(line)
		raw.Write([]byte{'\n'})
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			// Not an event (go vet's or the linker's words): as it is.
			rep.text(string(line) + "\n")
			continue
		}
		rep.event(e)
	}
	if err := sc.Err(); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("reading its events: %w", err)
	}
	return cmd.Wait()
}
