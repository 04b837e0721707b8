package main

import (
	"slices"
	"strings"
	"testing"
)

// TestHelpCommand: 'allot help CMD [SUB]' prints what 'allot CMD [SUB]
// --help' prints, and names a command it does not know.
func TestHelpCommand(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		code   int
		stdout string // a substring of stdout, or of stderr:
		stderr string
	}{
		{args: []string{"help"}, code: exitOK, stderr: "usage: allot <command> [flags]"},
		{args: []string{"help", "status"}, code: exitOK, stdout: "usage: allot status [--format table|json] [flags]"},
		{args: []string{"help", "rules"}, code: exitOK, stdout: "usage: allot rules <subcommand> [flags]"},
		{args: []string{"help", "rules", "get"}, code: exitOK, stdout: "usage: allot rules get [NAME] [--format yaml|json] [flags]"},
		{args: []string{"rules", "help", "put"}, code: exitOK, stdout: "usage: allot rules put FILE [--replace-all] [flags]"},
		{args: []string{"help", "reset", "list"}, code: exitOK, stdout: "usage: allot reset list [--rule R] [--tenant T] [flags]"},
		{args: []string{"help", "nope"}, code: exitUsage, stderr: `allot help: unknown command "nope"`},
		{args: []string{"help", "rules", "nope"}, code: exitUsage, stderr: `allot help: unknown subcommand "nope"`},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runIn(t, nil, tt.args...)
			if code != tt.code || !strings.Contains(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q\nwant exit %d, stdout with %q, stderr with %q", code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

// TestEveryCommandsHelp walks the command tree: every command has a
// line in its parent's list, its help from 'allot help' is its --help,
// and a command that takes subcommands lists each one.
func TestEveryCommandsHelp(t *testing.T) {
	var walk func(c *Command, path []string)
	walk = func(c *Command, path []string) {
		var names []string
		for _, s := range c.Commands {
			if s.Name == "" || s.Short == "" || strings.TrimSpace(s.Long) == "" {
				t.Errorf("allot %s: a subcommand with no name, Short or Long: %+v", strings.Join(path, " "), s)
			}
			if slices.Contains(names, s.Name) {
				t.Errorf("allot %s: two subcommands named %q", strings.Join(path, " "), s.Name)
			}
			names = append(names, s.Name)
			walk(s, append(slices.Clone(path), s.Name))
		}
		if len(path) == 0 {
			return
		}
		name := strings.Join(path, " ")
		t.Run(name, func(t *testing.T) {
			if c.Flags == nil && len(c.Commands) == 0 {
				t.Fatal("runs nothing: no Flags and no subcommands")
			}
			code, help, stderr := runIn(t, nil, append([]string{"help"}, path...)...)
			if code != exitOK || !strings.HasPrefix(help, "usage: allot "+name+" ") {
				t.Fatalf("allot help %s: exit %d, %q, %q", name, code, help, stderr)
			}
			if _, flagHelp, _ := runIn(t, nil, append(slices.Clone(path), "--help")...); flagHelp != help {
				t.Errorf("allot %s --help differs from allot help %s:\n%s\n---\n%s", name, name, flagHelp, help)
			}
			for _, s := range c.Commands {
				label := strings.TrimSpace(s.Name + " " + s.Args)
				if !strings.Contains(help, "\n  "+label+" ") {
					t.Errorf("the help does not list %q:\n%s", label, help)
				}
			}
			if c.Flags != nil && !strings.Contains(help, "\nflags:\n") {
				t.Errorf("the help lists no flags:\n%s", help)
			}
		})
	}
	walk(rootCommand(), nil)
}

// TestNoArgsMeansNone: a command whose Args names nothing refuses a
// positional argument with the same error, whichever command it is.
func TestNoArgsMeansNone(t *testing.T) {
	for _, args := range [][]string{
		{"status", "x"}, {"overrides", "list", "x"}, {"reset", "list", "x"},
		{"cluster", "inspect", "x", "--data-dir", "d", "--node-id", "n"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, _, stderr := runIn(t, nil, args...)
			if code != exitUsage || !strings.Contains(stderr, `unexpected argument "x"`) {
				t.Errorf("exit %d, %q; want %d and unexpected argument \"x\"", code, stderr, exitUsage)
			}
		})
	}
}

func TestWrapWords(t *testing.T) {
	for _, tt := range []struct {
		in    string
		width int
		want  []string
	}{
		{"", 10, []string{""}},
		{"one", 10, []string{"one"}},
		{"one two three", 7, []string{"one two", "three"}},
		{"one  two\nthree", 80, []string{"one two three"}},
		{"a longerthanwidth word", 5, []string{"a", "longerthanwidth", "word"}},
	} {
		if got := wrapWords(tt.in, tt.width); !slices.Equal(got, tt.want) {
			t.Errorf("wrapWords(%q, %d) = %q, want %q", tt.in, tt.width, got, tt.want)
		}
	}
}
