// Command allot is Allot's single binary: the coordinator, the agent
// sidecar, the simulator, the demo and the operator commands.
//
// Every subcommand takes --help ('allot help rules put' prints the
// same); the dispatch, the help and its lists of commands are all made
// from one Command per command and verb (command.go). Flags may also
// come from environment variables (ALLOT_ and the flag's name in
// capitals, dashes as underscores: --admin-token is ALLOT_ADMIN_TOKEN)
// and from a YAML file given with --config; a flag on the command line
// wins over the environment, which wins over the file.
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
	// Calendar periods count in the tenants' time zones (period: month,
	// cycle.time_zone); the binary carries the zone database, so that it
	// counts the same in a container image that has none.
	_ "time/tzdata"
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

// rootCommand is allot: every command, as its help lists them.
func rootCommand() *Command {
	return &Command{
		Name:  "allot",
		Usage: "<command> [flags]",
		Notes: `Flags can also be set with ALLOT_<FLAG> environment variables or a
--config YAML file. 'allot help <command>' is 'allot <command> --help'.`,
		Commands: []*Command{
			coordinatorCommand(),
			agentCommand(),
			simCommand(),
			demoCommand(),
			rulesCommand(),
			overridesCommand(),
			resetCommand(),
			statusCommand(),
			usageCommand(),
			auditCommand(),
			balanceCommand(),
			noticesCommand(),
			clusterCommand(),
			shardsCommand(),
			tokenCommand(),
			versionCommand(),
		},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{args: os.Args[1:], stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// run dispatches to a command and maps its error to an exit code.
func run(ctx context.Context, e *env) int {
	root := rootCommand()
	if len(e.args) == 0 {
		root.writeHelp(e.stderr, "", nil)
		return exitUsage
	}
	name := e.args[0]
	switch {
	case name == "help" && len(e.args) > 1:
		return report(e.stderr, name, root.help(e, "", e.args[1:]))
	case isHelpArg(name):
		root.writeHelp(e.stderr, "", nil)
		return exitOK
	case name == "--version" || name == "-version":
		name = "version"
	}
	c := root.lookup(name)
	if c == nil {
		fmt.Fprintf(e.stderr, "allot: unknown command %q\n\n", name)
		root.writeHelp(e.stderr, "", nil)
		return exitUsage
	}
	sub := e.shift()
	sub.exit = &exitHooks{}
	err := c.dispatch(ctx, sub, c.Name)
	sub.exit.run(err)
	return report(e.stderr, name, err)
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

func versionCommand() *Command {
	return &Command{
		Name:  "version",
		Short: "print the version, revision and Go version (also allot --version)",
		Long:  "Prints the version, the VCS revision it was built from and the Go version that built it.",
		Flags: func(*flags) runFunc {
			return func(_ context.Context, e *env, _ []string) error {
				fmt.Fprintln(e.stdout, readBuildInfo())
				return nil
			}
		},
	}
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
