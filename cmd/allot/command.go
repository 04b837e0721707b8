package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Command is one of allot's commands, or one verb of a command that has
// several (allot rules get): its name, its help, its flags and what it
// runs, written once. The dispatcher, every --help, 'allot help' and the
// lists of commands in the help are made from it, as Go's cmd/go makes
// its own from base.Command, so that the list a command's help shows is
// the list it dispatches on.
type Command struct {
	// Name is the word that selects it: "rules", "get".
	Name string
	// Args names its positional arguments as its parent's list shows
	// them ("[NAME]", "FILE..."). A command that names none takes none:
	// its flags are read up to the first argument, which is refused. One
	// that names some reads its flags wherever they stand ("allot rules
	// get NAME --format json"), which the flag package alone does not.
	Args string
	// Usage is the synopsis after its full name on its help's first
	// line ("[NAME] [--format yaml|json] [flags]"). Empty: Args, then
	// [flags]; for a command made only of subcommands, "<subcommand>
	// [flags]".
	Usage string
	// Short is its line in its parent's list.
	Short string
	// Long is its help above the list of its subcommands and its flags.
	Long string
	// Notes is its help after the list of its subcommands.
	Notes string
	// Flags registers its flags on f and returns what runs it once they
	// are parsed. Nil for a command that is only its subcommands.
	Flags func(f *flags) runFunc
	// Commands are its subcommands, in the order its help lists them.
	Commands []*Command
}

// runFunc runs a command with its positional arguments, once its flags
// are parsed.
type runFunc func(ctx context.Context, e *env, args []string) error

// options are the flags of a command that runs as a daemon (allot agent,
// allot coordinator), gathered in a struct as kubectl's options are:
// registered, then checked against each other, then run. Everything that
// validate refuses is refused before anything listens or writes.
type options interface {
	register(f *flags)
	validate() error
	// run runs the command; f says where a flag's value came from.
	run(ctx context.Context, e *env, f *flags) error
}

// runOptions registers o's flags on f and returns what validates and
// runs them: a Command's Flags for a daemon.
func runOptions(f *flags, o options) runFunc {
	o.register(f)
	return func(ctx context.Context, e *env, _ []string) error {
		if err := o.validate(); err != nil {
			return err
		}
		return o.run(ctx, e, f)
	}
}

// helpWidth is the width the lists of commands are wrapped to.
const helpWidth = 80

// lookup returns c's subcommand called name, or nil.
func (c *Command) lookup(name string) *Command {
	for _, s := range c.Commands {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// isHelpArg reports whether a command's first argument asks for its help
// rather than naming a subcommand.
func isHelpArg(a string) bool {
	switch a {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// dispatch runs c, or the subcommand its first argument names. path is
// the words that selected c ("rules get"): the command's name in its
// help and its errors.
func (c *Command) dispatch(ctx context.Context, e *env, path string) error {
	if len(c.Commands) > 0 && len(e.args) > 0 {
		if sub := c.lookup(e.args[0]); sub != nil {
			return sub.dispatch(ctx, e.shift(), path+" "+sub.Name)
		}
		// "allot rules help get" is "allot help rules get"; a command
		// with flags of its own reads -h and --help as one of them.
		if a := e.args[0]; a == "help" || (c.Flags == nil && isHelpArg(a)) {
			return c.help(e, path, e.args[1:])
		}
	}
	if c.Flags == nil {
		if len(e.args) == 0 {
			return usagef(path, "missing subcommand")
		}
		return usagef(path, "unknown subcommand %q", e.args[0])
	}
	f, run := c.flags(e, path)
	var args []string
	if c.Args == "" {
		if err := f.parse(e); err != nil {
			return err
		}
		if err := f.noArgs(); err != nil {
			return err
		}
	} else {
		var err error
		if args, err = parseArgs(f, e); err != nil {
			return err
		}
	}
	return run(ctx, e, args)
}

// flags makes c's flag set, whose --help prints c's help, and registers
// c's flags on it.
func (c *Command) flags(e *env, path string) (*flags, runFunc) {
	f := newFlags(e, path)
	run := c.Flags(f)
	f.help = func() { c.writeHelp(e.stdout, path, f) }
	return f, run
}

// help prints the help of the subcommand of c that words name (c's own
// when they name none) and returns errHelp: 'allot help rules get'.
func (c *Command) help(e *env, path string, words []string) error {
	for _, w := range words {
		sub := c.lookup(w)
		if sub == nil {
			if path == "" {
				return &usageError{err: fmt.Errorf("unknown command %q", w)}
			}
			return usagef(path, "unknown subcommand %q", w)
		}
		c, path = sub, strings.TrimSpace(path+" "+sub.Name)
	}
	var f *flags
	if c.Flags != nil {
		f, _ = c.flags(e, path)
	}
	c.writeHelp(e.stdout, path, f)
	return errHelp
}

// synopsis is what follows the command's full name on its help's first
// line.
func (c *Command) synopsis() string {
	switch {
	case c.Usage != "":
		return c.Usage
	case c.Flags == nil:
		return "<subcommand> [flags]"
	}
	return strings.TrimSpace(c.Args + " [flags]")
}

// writeHelp prints c's help: its usage, Long, the list of its
// subcommands, Notes, and the flags of f (nil for a command without
// flags of its own).
func (c *Command) writeHelp(w io.Writer, path string, f *flags) {
	full := strings.TrimSpace("allot " + path)
	usage := fmt.Sprintf("usage: %s %s", full, c.synopsis())
	if c.Flags != nil {
		// A command that runs by itself as well names its subcommands'
		// own usage under its own: allot reset RULE, allot reset list.
		for _, s := range c.Commands {
			usage += fmt.Sprintf("\n       %s %s %s", full, s.Name, s.synopsis())
		}
	}
	paragraphs := []string{usage, strings.TrimSpace(c.Long)}
	word := "subcommand"
	if path == "" {
		word = "command"
	}
	if len(c.Commands) > 0 {
		var list strings.Builder
		list.WriteString(word + "s:\n")
		writeCommandList(&list, c.Commands)
		paragraphs = append(paragraphs, strings.TrimRight(list.String(), "\n"))
	}
	if len(c.Commands) > 0 {
		paragraphs = append(paragraphs, fmt.Sprintf("Run '%s <%s> --help' for its flags.", full, word))
	}
	paragraphs = append(paragraphs, strings.TrimSpace(c.Notes))
	if f != nil {
		var defaults bytes.Buffer
		f.SetOutput(&defaults)
		f.PrintDefaults()
		f.SetOutput(io.Discard)
		paragraphs = append(paragraphs, "flags:\n"+strings.TrimRight(defaults.String(), "\n"),
			fmt.Sprintf("Every flag can also be set as ALLOT_<NAME> (e.g. %s) or in the --config file.", envName(firstFlag(f.FlagSet))))
	}
	var out []string
	for _, p := range paragraphs {
		if p != "" {
			out = append(out, p)
		}
	}
	fmt.Fprintln(w, strings.Join(out, "\n\n"))
}

// writeCommandList prints one line per command, its name and arguments
// and then its Short, wrapped to helpWidth.
func writeCommandList(w io.Writer, cmds []*Command) {
	label := func(c *Command) string { return strings.TrimSpace(c.Name + " " + c.Args) }
	width := 0
	for _, c := range cmds {
		width = max(width, len(label(c)))
	}
	for _, c := range cmds {
		for i, line := range wrapWords(c.Short, helpWidth-width-4) {
			name := ""
			if i == 0 {
				name = label(c)
			}
			fmt.Fprintf(w, "  %-*s  %s\n", width, name, line)
		}
	}
}

// wrapWords splits s into lines of at most width bytes, at spaces; a
// word longer than width has a line of its own.
func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}

// shift is e with its first argument dropped: what a subcommand runs
// with.
func (e *env) shift() *env {
	sub := *e
	sub.args = e.args[1:]
	return &sub
}

// parseArgs parses a command line whose positional arguments may come
// before, between or after its flags ("allot rules get NAME --format
// json"): the flag package alone stops at the first positional argument.
// It returns the positional arguments.
func parseArgs(f *flags, e *env) ([]string, error) {
	var flagArgs, positional []string
	for i := 0; i < len(e.args); i++ {
		a := e.args[i]
		if a == "--" {
			positional = append(positional, e.args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			continue
		}
		flagArgs = append(flagArgs, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		// A flag that takes a value takes the next argument, even one
		// that looks like a flag, as the flag package does.
		if fl := f.Lookup(name); fl != nil && !isBoolFlag(fl) && i+1 < len(e.args) {
			i++
			flagArgs = append(flagArgs, e.args[i])
		}
	}
	sub := *e
	sub.args = flagArgs
	if err := f.parse(&sub); err != nil {
		return nil, err
	}
	return positional, nil
}

func isBoolFlag(fl *flag.Flag) bool {
	b, ok := fl.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
