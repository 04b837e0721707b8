// Command allot is Allot's single binary: the coordinator, the agent
// sidecar, the simulator, the demo and the operator commands.
//
// Every subcommand takes --help. Flags may also come from environment
// variables (ALLOT_ and the flag's name in capitals, dashes as
// underscores: --admin-token is ALLOT_ADMIN_TOKEN) and from a YAML file
// given with --config; a flag on the command line wins over the
// environment, which wins over the file.
//
// Exit codes: 0 success, 1 failure (including a failed check), 2 a usage
// error (bad flags, arguments or input files).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitRefused: a coordinator that must not run as it is (damaged
	// storage, a removed member, a second cluster in the making):
	// restarting it changes nothing, so service managers should not
	// (deploy/systemd has RestartPreventExitStatus=3).
	exitRefused = 3
)

// refusedError is an error that ends with exitRefused.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// env is what a command runs with: its arguments, its streams and the
// process environment, passed in so tests can run commands in-process.
type env struct {
	args   []string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// exit runs when the command returns (set by run; copies of an env
	// share it): what a command started for its whole run, such as its
	// trace, ends there.
	exit *exitHooks
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env) error
}

func commands() []command {
	return []command{
		{"coordinator", "run a coordinator cluster member", runCoordinator},
		{"agent", "run the agent as an HTTP sidecar for gateways not written in Go", runAgent},
		{"sim", "simulate a fleet and compare strategies", runSim},
		{"demo", "run a 3-node cluster and 8 gateways on loopback, live", runDemo},
		{"rules", "get, put, delete and validate rules", runRules},
		{"overrides", "set, list and delete per-tenant overrides of rules", runOverrides},
		{"reset", "reset one key's counters fleet-wide, or list the resets", runReset},
		{"status", "show the coordinator cluster", runStatus},
		{"usage", "export reconciled usage for billing", runUsage},
		{"audit", "show who changed rules, overrides and membership, and how", runAudit},
		{"cluster", "remove members, back up and restore the cluster", runCluster},
		{"shards", "split a region into shard groups and move slots between them", runShards},
		{"token", "make a bearer token for an agent, a reader or an admin", runToken},
		{"version", "print the version, VCS revision and Go version (also allot --version)", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{args: os.Args[1:], stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and maps its error to an exit code.
func run(ctx context.Context, e *env) int {
	if len(e.args) == 0 || e.args[0] == "-h" || e.args[0] == "--help" || e.args[0] == "help" {
		usage(e.stderr)
		if len(e.args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	name := e.args[0]
	if name == "--version" || name == "-version" {
		name = "version"
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		sub := *e
		sub.args = e.args[1:]
		sub.exit = &exitHooks{}
		err := c.run(ctx, &sub)
		sub.exit.run(err)
		return report(e.stderr, name, err)
	}
	fmt.Fprintf(e.stderr, "allot: unknown command %q\n\n", name)
	usage(e.stderr)
	return exitUsage
}

// report prints a command's error and returns its exit code.
func report(w io.Writer, name string, err error) int {
	var ue *usageError
	var re *refusedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &re):
		fmt.Fprintf(w, "allot %s: %v\n", name, re.err)
		return exitRefused
	case errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(w, "allot %s: %v\n", name, ue.err)
		if ue.hint != "" {
			fmt.Fprintf(w, "run 'allot %s --help' for usage\n", ue.hint)
		}
		return exitUsage
	default:
		fmt.Fprintf(w, "allot %s: %v\n", name, err)
		return exitFailure
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: allot <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'allot <command> --help' for a command's flags. Flags can also be set")
	fmt.Fprintln(w, "with ALLOT_<FLAG> environment variables or a --config YAML file.")
}

// usageError is a mistake in how a command was called: exit code 2.
type usageError struct {
	err  error
	hint string // the command whose --help to suggest
}

func (u *usageError) Error() string { return u.err.Error() }
func (u *usageError) Unwrap() error { return u.err }

// usagef returns a usage error for a command.
func usagef(cmd, format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...), hint: cmd}
}

// errHelp is returned when --help was asked for: exit code 0.
var errHelp = errors.New("help requested")

// errChecksFailed is wrapped when a command ran but a check it makes
// failed (the demo's summary).
var errChecksFailed = errors.New("checks failed")

func runVersion(_ context.Context, e *env) error {
	fmt.Fprintln(e.stdout, readBuildInfo())
	return nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
