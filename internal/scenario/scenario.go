// Package scenario runs the scenario tests of the packages with the most
// behaviour (lease, coordinator, agent): scripts of commands, each followed
// by the output it must produce, in files under a package's testdata.
//
// The files are github.com/cockroachdb/datadriven files:
//
//	# a comment
//	command positional key=value flag
//	input line
//	----
//	expected output
//
// A command is followed by its ---- line and the output it must print, up
// to a blank line (an output holding blank lines goes between two ----
// lines, as datadriven allows). Lines between a command and its ---- are
// its input. Run the tests with -rewrite to write every command's actual
// output into its file, then review the diff: the files are the test.
//
// On top of datadriven's syntax the runner is strict, so that a typo can
// never make a scenario test less than it says: an unknown command, an
// argument a command does not take, a malformed or missing value, input
// given to a command that takes none (usually a ---- forgotten after a
// command, which turns the commands below it into its input), or output
// that differs from the expected block, including a missing block, fails
// the test with the file and line.
package scenario

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// The kinds of mistake a script can make, wrapped by every Error.
var (
	ErrUnknownCommand  = errors.New("unknown command")
	ErrUnknownArgument = errors.New("unknown argument")
	ErrMissingArgument = errors.New("missing argument")
	ErrBadValue        = errors.New("malformed value")
	ErrUnexpectedInput = errors.New("takes no input")
)

// Error is a mistake in a script, or a command that failed, at a position
// (file:line) of its file.
type Error struct {
	Pos string // file:line
	Cmd string
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s: %v", e.Pos, e.Cmd, e.Err) }

// Unwrap returns the mistake.
func (e *Error) Unwrap() error { return e.Err }

// Command is one command a script may use.
type Command struct {
	// Positional names the bare words that come first, in order; each is
	// required.
	Positional []string
	// Keys are the key=value arguments the command takes, and Required
	// those of them it must be given.
	Keys     []string
	Required []string
	// Lists are the keys that take a list, key=(a, b), or one value.
	Lists []string
	// Flags are the bare words the command takes after its positional
	// ones.
	Flags []string
	// Input allows lines between the command and its ----.
	Input bool
	// Run executes the command and returns what it prints.
	Run func(c *Call) (string, error)
}

// Commands are a script's commands by name.
type Commands map[string]Command

// Run runs every file matching glob, each as a subtest named for its file,
// with the commands setup returns for it: state made by setup lasts for
// one file. No file matching fails the test.
func Run(t *testing.T, glob string, setup func(t *testing.T) Commands) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatalf("scenario: %s: %v", glob, err)
	}
	if len(files) == 0 {
		t.Fatalf("scenario: no file matches %s", glob)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			RunFile(t, file, setup(t))
		})
	}
}

// RunFile runs one script file with cmds.
func RunFile(tb testing.TB, path string, cmds Commands) {
	tb.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("scenario: %v", err)
	}
	lines := strings.Split(string(src), "\n")
	datadriven.RunTestAny(tb, path, func(tb testing.TB, d *datadriven.TestData) string {
		return dispatch(tb, d, lines, cmds)
	})
}

// RunString runs a script held in src, named "<string>" in errors.
func RunString(tb testing.TB, src string, cmds Commands) {
	tb.Helper()
	lines := strings.Split(src, "\n")
	datadriven.RunTestFromStringAny(tb, src, func(tb testing.TB, d *datadriven.TestData) string {
		return dispatch(tb, d, lines, cmds)
	})
}

// dispatch runs one directive, failing the test at its position on any
// mistake.
func dispatch(tb testing.TB, d *datadriven.TestData, lines []string, cmds Commands) string {
	tb.Helper()
	file, line := splitPos(d.Pos)
	c, err := bind(tb, file, line, lines, d.Cmd, d.CmdArgs, d.Input, cmds)
	if err == nil {
		var out string
		out, err = c.spec.Run(c)
		if err == nil {
			return out
		}
	}
	var se *Error
	if !errors.As(err, &se) {
		se = &Error{Pos: d.Pos, Cmd: d.Cmd, Err: err}
	}
	tb.Fatal(se.Error())
	return ""
}

// splitPos splits datadriven's "file:line".
func splitPos(pos string) (string, int) {
	i := strings.LastIndexByte(pos, ':')
	n, err := strconv.Atoi(pos[i+1:])
	if i < 0 || err != nil {
		return pos, 0
	}
	return pos[:i], n
}

// bind checks a directive against its command and returns the call.
func bind(tb testing.TB, file string, line int, lines []string, name string, args []datadriven.CmdArg, input string, cmds Commands) (*Call, error) {
	pos := fmt.Sprintf("%s:%d", file, line)
	spec, ok := cmds[name]
	if !ok {
		return nil, &Error{Pos: pos, Cmd: name, Err: fmt.Errorf("%w; the commands are %s", ErrUnknownCommand, strings.Join(sortedKeys(cmds), ", "))}
	}
	c := &Call{tb: tb, file: file, line: line, lines: lines, name: name, spec: spec, input: input, vals: map[string]string{}, lists: map[string][]string{}, flags: map[string]bool{}}
	fail := func(err error) (*Call, error) { return nil, &Error{Pos: pos, Cmd: name, Err: err} }
	if input != "" && !spec.Input {
		return fail(fmt.Errorf("%w (is the ---- after it missing?)", ErrUnexpectedInput))
	}
	for i, a := range args {
		if i < len(spec.Positional) {
			if len(a.Vals) > 0 {
				return fail(fmt.Errorf("%w: want %s first, got %s", ErrMissingArgument, spec.Positional[i], a))
			}
			c.positional = append(c.positional, a.Key)
			continue
		}
		_, seenVal := c.vals[a.Key]
		if seenVal || c.flags[a.Key] {
			return fail(fmt.Errorf("%w: %s is given twice", ErrBadValue, a.Key))
		}
		switch {
		case slices.Contains(spec.Flags, a.Key):
			if len(a.Vals) > 0 {
				return fail(fmt.Errorf("%w: %s is a flag and takes no value, got %s", ErrBadValue, a.Key, a))
			}
			c.flags[a.Key] = true
		case slices.Contains(spec.Keys, a.Key):
			if len(a.Vals) != 1 {
				return fail(fmt.Errorf("%w: %s takes one value (%s=...), got %s", ErrBadValue, a.Key, a.Key, a))
			}
			c.vals[a.Key] = a.Vals[0]
		case slices.Contains(spec.Lists, a.Key):
			if len(a.Vals) == 0 {
				return fail(fmt.Errorf("%w: %s takes a list (%s=(a, b)) or a value, got %s", ErrBadValue, a.Key, a.Key, a))
			}
			c.vals[a.Key] = ""
			c.lists[a.Key] = a.Vals
		default:
			return fail(fmt.Errorf("%w %s; %s takes %s", ErrUnknownArgument, a, name, spec.describe()))
		}
	}
	if len(c.positional) < len(spec.Positional) {
		return fail(fmt.Errorf("%w: %s", ErrMissingArgument, spec.Positional[len(c.positional)]))
	}
	for _, k := range spec.Required {
		if _, ok := c.vals[k]; !ok {
			return fail(fmt.Errorf("%w: %s=", ErrMissingArgument, k))
		}
	}
	return c, nil
}

// describe lists what a command takes, for errors.
func (spec Command) describe() string {
	var parts []string
	for _, p := range spec.Positional {
		parts = append(parts, "<"+p+">")
	}
	for _, k := range spec.Keys {
		parts = append(parts, k+"=")
	}
	for _, k := range spec.Lists {
		parts = append(parts, k+"=(...)")
	}
	parts = append(parts, spec.Flags...)
	if len(parts) == 0 {
		return "no arguments"
	}
	return strings.Join(parts, " ")
}

func sortedKeys(cmds Commands) []string {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
