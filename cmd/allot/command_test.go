package main

import (
	"errors"
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

// TestDaemonOptionsValidate: the daemons' flags are checked by validate
// alone, before run opens a port or a data directory: each mistake is a
// usage error naming the flag, and valid flags complete the Config.
func TestDaemonOptionsValidate(t *testing.T) {
	rulesFile := writeTemp(t, "rules.yaml", "rules:\n"+ruleText("a"))
	for _, tt := range []struct {
		name string
		o    options
		args []string
		want string // in the error; "" for none
	}{
		{"coordinator", &coordinatorOptions{}, []string{"--node-id", "c1", "--data-dir", "d"}, ""},
		{"coordinator without a data dir", &coordinatorOptions{}, []string{"--node-id", "c1"}, "--node-id and --data-dir are required"},
		{"coordinator, a bad log level", &coordinatorOptions{}, []string{"--node-id", "c1", "--data-dir", "d", "--log-level", "loud"}, `--log-level "loud"`},
		{"coordinator, two sinks", &coordinatorOptions{}, []string{"--node-id", "c1", "--data-dir", "d", "--ledger-sink", "postgres://x", "--ledger-sink-file", "f"}, "not both"},
		{"agent", &agentOptions{}, []string{"--coordinators", "a:1,b:2", "--node-id", "gw-1"}, ""},
		{"agent standalone", &agentOptions{}, []string{"--rules", rulesFile}, ""},
		{"agent standalone without rules", &agentOptions{}, nil, "needs --rules"},
		{"agent, a bad log level", &agentOptions{}, []string{"--coordinators", "a:1", "--log-level", "loud"}, `--log-level "loud"`},
		{"agent, a certificate without its key", &agentOptions{}, []string{"--coordinators", "a:1", "--http-cert", "c.pem"}, "--http-cert and --http-key go together"},
		{"agent beyond loopback", &agentOptions{}, []string{"--coordinators", "a:1", "--http-addr", "0.0.0.0:7600"}, "--http-addr 0.0.0.0:7600 is not a loopback address"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := &env{args: tt.args, getenv: func(string) string { return "" }}
			f := newFlags(e, "test")
			tt.o.register(f)
			if err := f.parse(e); err != nil {
				t.Fatal(err)
			}
			err := tt.o.validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("validate = %v; want a usage error with %q", err, tt.want)
			}
		})
	}
	o := &agentOptions{}
	e := &env{args: []string{"--coordinators", "a:1, b:2", "--rules-cache", "c.yaml"}, getenv: func(string) string { return "" }}
	f := newFlags(e, "agent")
	o.register(f)
	if err := f.parse(e); err != nil || o.validate() != nil {
		t.Fatal("valid flags refused")
	}
	if !slices.Equal(o.cfg.Coordinators, []string{"a:1", "b:2"}) || o.cfg.RulesCacheFile != "c.yaml" {
		t.Errorf("the agent's Config from the flags: coordinators %q, rules cache %q", o.cfg.Coordinators, o.cfg.RulesCacheFile)
	}
}
