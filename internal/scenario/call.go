package scenario

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// Call is one command of a script being run: its arguments, checked
// against the Command, and its input. A getter given a malformed value
// fails the test at the command's line.
type Call struct {
	tb         testing.TB
	file       string
	line       int      // the command's line in file
	lines      []string // the file's lines
	name       string
	spec       Command
	positional []string
	vals       map[string]string
	lists      map[string][]string
	flags      map[string]bool
	input      string
}

// TB is the test the call runs in.
func (c *Call) TB() testing.TB { return c.tb }

// Pos is the command's file:line.
func (c *Call) Pos() string { return fmt.Sprintf("%s:%d", c.file, c.line) }

// Input is the text between the command and its ----, trimmed.
func (c *Call) Input() string { return c.input }

// Arg is the i-th positional argument.
func (c *Call) Arg(i int) string {
	if i >= len(c.spec.Positional) {
		c.fatal(fmt.Errorf("the runner reads positional argument %d; the command declares %d", i, len(c.spec.Positional)))
	}
	return c.positional[i]
}

// Flag reports whether the flag was given.
func (c *Call) Flag(name string) bool {
	if !slices.Contains(c.spec.Flags, name) {
		c.fatal(fmt.Errorf("the runner reads flag %s, which the command does not declare", name))
	}
	return c.flags[name]
}

// Has reports whether key was given.
func (c *Call) Has(key string) bool {
	if !slices.Contains(c.spec.Keys, key) && !slices.Contains(c.spec.Lists, key) {
		c.fatal(fmt.Errorf("the runner asks for %s=, which the command does not declare", key))
	}
	_, ok := c.vals[key]
	return ok
}

// String is key's value, or def.
func (c *Call) String(key, def string) string {
	if v, ok := c.raw(key); ok {
		return v
	}
	return def
}

// Choice is key's value, which must be one of choices, or def.
func (c *Call) Choice(key, def string, choices ...string) string {
	v, ok := c.raw(key)
	if !ok {
		return def
	}
	if !slices.Contains(choices, v) {
		c.bad(key, v, fmt.Errorf("want one of %s", strings.Join(choices, ", ")))
	}
	return v
}

// Float is key's value as a finite number, or def.
func (c *Call) Float(key string, def float64) float64 {
	v, ok := c.raw(key)
	if !ok {
		return def
	}
	x, err := strconv.ParseFloat(v, 64)
	if err == nil && (math.IsNaN(x) || math.IsInf(x, 0)) {
		err = fmt.Errorf("not a finite number")
	}
	if err != nil {
		c.bad(key, v, err)
	}
	return x
}

// Int is key's value as a whole number, or def.
func (c *Call) Int(key string, def int64) int64 {
	v, ok := c.raw(key)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		c.bad(key, v, err)
	}
	return n
}

// Duration is key's value as a Go duration, or def.
func (c *Call) Duration(key string, def time.Duration) time.Duration {
	v, ok := c.raw(key)
	if !ok {
		return def
	}
	return c.ParseDuration(key, v)
}

// ParseDuration reads v, the value of the argument named what, as a Go
// duration, failing the test at the command's line if it is not one.
func (c *Call) ParseDuration(what, v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		c.bad(what, v, err)
	}
	return d
}

// Fatalf fails the test at the command's line.
func (c *Call) Fatalf(format string, args ...any) {
	c.fatal(fmt.Errorf(format, args...))
}

// InputPos is the file:line of the n-th line (from 1) of the input.
func (c *Call) InputPos(n int) string {
	return fmt.Sprintf("%s:%d", c.file, c.inputLine(n))
}

// inputLine finds the n-th input line in the file: the input starts after
// the command's line (and its continuations) and any blank lines, which
// datadriven trims.
func (c *Call) inputLine(n int) int {
	i := c.line - 1 // the command's line, from 0
	for i < len(c.lines) && strings.HasSuffix(strings.TrimSpace(c.lines[i]), `\`) {
		i++
	}
	i++
	for i < len(c.lines) && strings.TrimSpace(c.lines[i]) == "" {
		i++
	}
	return i + n
}

// Lines runs each line of the input as a command of cmds, checked as
// strictly as the script's own, and returns what they print. Blank lines
// and lines starting with # are skipped. A mistake fails the test at the
// input line's position.
func (c *Call) Lines(cmds Commands) (string, error) {
	var out strings.Builder
	for i, text := range strings.Split(c.input, "\n") {
		text = strings.TrimSpace(text)
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		line := c.inputLine(i + 1)
		name, args, err := datadriven.ParseLine(text)
		if err != nil {
			return "", &Error{Pos: fmt.Sprintf("%s:%d", c.file, line), Cmd: c.name, Err: fmt.Errorf("%w: %v", ErrBadValue, err)}
		}
		sub, err := bind(c.tb, c.file, line, c.lines, name, args, "", cmds)
		if err != nil {
			return "", err
		}
		s, err := sub.spec.Run(sub)
		if err != nil {
			return "", &Error{Pos: sub.Pos(), Cmd: name, Err: err}
		}
		out.WriteString(s)
	}
	return out.String(), nil
}

// List is the values of a key that takes a list, or nil.
func (c *Call) List(key string) []string {
	if !slices.Contains(c.spec.Lists, key) {
		c.fatal(fmt.Errorf("the runner reads %s=(...), which the command does not declare", key))
	}
	return c.lists[key]
}

// raw is key's value as given; asking for a key the command does not
// declare is the runner's mistake, and fails the test.
func (c *Call) raw(key string) (string, bool) {
	if slices.Contains(c.spec.Lists, key) {
		c.fatal(fmt.Errorf("the runner reads %s= as one value; the command declares it a list", key))
	}
	if !slices.Contains(c.spec.Keys, key) {
		c.fatal(fmt.Errorf("the runner reads %s=, which the command does not declare", key))
	}
	v, ok := c.vals[key]
	return v, ok
}

func (c *Call) bad(key, v string, err error) {
	c.fatal(fmt.Errorf("%w: %s=%s: %v", ErrBadValue, key, v, err))
}

func (c *Call) fatal(err error) {
	c.tb.Helper()
	c.tb.Fatal((&Error{Pos: c.Pos(), Cmd: c.name, Err: err}).Error())
}
