package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// An output a doc shows is a fenced block right after the line
// "<!-- output: NAME -->": what a command printed. The doc tests run the
// commands and compare what they print with the block, numbers, addresses,
// paths, cluster IDs and the order of lines aside.

var docOutputMarker = regexp.MustCompile(`^\s*<!-- output: ([a-z0-9-]+) -->\s*$`)

// readDocOutputs returns a doc's output blocks by name.
func readDocOutputs(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	out := map[string]string{}
	for i := 0; i < len(lines); i++ {
		m := docOutputMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "```") {
			t.Fatalf("%s:%d: output %q is not followed by a fenced block", path, i+1, m[1])
		}
		if _, dup := out[m[1]]; dup {
			t.Fatalf("%s:%d: output %q given twice", path, i+1, m[1])
		}
		indent := lines[i+1][:len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " "))]
		var b strings.Builder
		j := i + 2
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			b.WriteString(strings.TrimPrefix(lines[j], indent) + "\n")
		}
		if j == len(lines) {
			t.Fatalf("%s:%d: output %q's block is never closed", path, i+1, m[1])
		}
		out[m[1]] = b.String()
		i = j
	}
	return out
}

var outputNoise = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT[0-9:.]+Z\s*`), ""},              // hclog's timestamps
	{regexp.MustCompile(`(\d{1,3}\.){3}\d{1,3}:\d+`), "ADDR"},             // host:port
	{regexp.MustCompile(`[0-9a-f]{32}`), "CLUSTER"},                       // cluster IDs
	{regexp.MustCompile(`(/[^\s:;,"]+)+/(raft\.db|snapshots)`), "DIR/$2"}, // data dirs
	{regexp.MustCompile(`(/[^\s:;,"]+)+/b\.snap`), "b.snap"},
	{regexp.MustCompile(` \(leader\)`), ""},                                             // whoever leads in this run
	{regexp.MustCompile(`[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} [0-9:]+ GMT`), "DATE"}, // HTTP Date headers
	{regexp.MustCompile(`-?\d+(\.\d+)?([eE][-+]?\d+)?`), "0"},                           // numbers, of either sign, in any notation
	{regexp.MustCompile(`[ \t]+`), " "},
}

// normalizeOutput is text with the noise replaced and its lines sorted.
func normalizeOutput(text string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		for _, n := range outputNoise {
			l = n.re.ReplaceAllString(l, n.with)
		}
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	return lines
}

// checkDocOutput compares the doc's block name with what was printed.
func checkDocOutput(t *testing.T, doc map[string]string, name, printed string, seen map[string]bool) {
	t.Helper()
	seen[name] = true
	dumpDocOutput(name, printed)
	want, ok := doc[name]
	if !ok {
		t.Errorf("the doc has no output block %q; this run printed:\n%s", name, printed)
		return
	}
	if !sameOutput(printed, want) {
		t.Errorf("output %q: the doc shows\n%s\nbut the command printed\n%s", name, want, printed)
	}
}

// sameOutput reports whether two outputs differ only by noise.
func sameOutput(a, b string) bool { return slices.Equal(normalizeOutput(a), normalizeOutput(b)) }

// dumpDocOutput appends what a run printed for the block name to the file
// $ALLOT_DOC_DUMP, if set: to regenerate the doc's blocks.
func dumpDocOutput(name, printed string) {
	path := os.Getenv("ALLOT_DOC_DUMP")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err == nil {
		fmt.Fprintf(f, "== %s\n%s\n", name, strings.TrimRight(printed, "\n"))
		f.Close()
	}
}

// lineWith is the last line of text containing every one of subs.
func lineWith(text string, subs ...string) string {
	lines := strings.Split(text, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(lines[i], s)
		}
		if ok {
			return lines[i]
		}
	}
	return ""
}

// requireDocOutputsSeen fails for each output block of the doc at path
// that this test checks (docOutputTests) and no command of it printed.
func requireDocOutputsSeen(t *testing.T, path string, doc map[string]string, seen map[string]bool) {
	t.Helper()
	test, _, _ := strings.Cut(t.Name(), "/")
	mine, err := docOutputsOf(docOutputTests, strings.TrimPrefix(path, "../../"), test, slices.Sorted(maps.Keys(doc)))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range mine {
		if !seen[name] {
			t.Errorf("%s shows output %q, which no command of this test printed", path, name)
		}
	}
}

// A block may be a transcript: a line starting with "$ " is a command (a
// line ending in '\' continues it), and the lines after it, up to the next
// command, are what it printed.

// docStep is one command of a transcript and what the doc says it printed.
type docStep struct {
	cmd   string // joined onto one line, without the "$ "
	shown string // as the doc has it: the "$ " lines
	out   string
}

// transcriptSteps cuts a transcript into its commands; text before the
// first command is an error.
func transcriptSteps(block string) ([]docStep, error) {
	var steps []docStep
	lines := strings.Split(strings.TrimRight(block, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		cmd, ok := strings.CutPrefix(line, "$ ")
		if !ok {
			if len(steps) == 0 {
				return nil, fmt.Errorf("line %d, %q, is before the transcript's first command", i+1, line)
			}
			steps[len(steps)-1].out += line + "\n"
			continue
		}
		shown := line
		for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
			i++
			cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(lines[i])
			shown += "\n" + lines[i]
		}
		steps = append(steps, docStep{cmd: cmd, shown: shown})
	}
	if len(steps) == 0 {
		return nil, errors.New("the transcript has no command (a line starting with \"$ \")")
	}
	return steps, nil
}

// checkDocTranscript runs each command of the doc's transcript name with
// run and compares what it printed with what the doc shows after it.
func checkDocTranscript(t *testing.T, doc map[string]string, name string, run func(cmd string) string, seen map[string]bool) {
	t.Helper()
	seen[name] = true
	block, ok := doc[name]
	if !ok {
		t.Errorf("the doc has no output block %q", name)
		return
	}
	steps, err := transcriptSteps(block)
	if err != nil {
		t.Errorf("output %q: %v", name, err)
		return
	}
	var printed strings.Builder
	for _, s := range steps {
		got := run(s.cmd)
		fmt.Fprintf(&printed, "%s\n%s", s.shown, got)
		if !sameOutput(got, s.out) {
			t.Errorf("output %q: after\n%s\nthe doc shows\n%s\nbut the command printed\n%s", name, s.shown, s.out, got)
		}
	}
	dumpDocOutput(name, printed.String())
}

// docShell runs a doc's commands as a reader types them: in bash, in dir,
// with the allot the tests built first in PATH.
type docShell struct {
	t   *testing.T
	dir string
	env []string // added to cliEnv's
	// path are directories searched after the one holding allot, before
	// $PATH: other programs a doc runs.
	path []string
	// subst are pairs of what the doc has and what this run uses instead
	// (a port, a path): replaced in each command, and back in its output.
	subst []string
}

// run runs one command and returns what it printed on stdout and stderr,
// interleaved as written, and its exit code.
func (s docShell) run(command string) (string, int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", strings.NewReplacer(s.subst...).Replace(command))
	cmd.Dir = s.dir
	search := append(append([]string{filepath.Dir(allotBinary(s.t))}, s.path...), os.Getenv("PATH"))
	cmd.Env = append(cliEnv("PATH="+strings.Join(search, string(os.PathListSeparator))), s.env...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		s.t.Fatalf("%s: %v", command, err)
	}
	back := make([]string, len(s.subst))
	for i := 0; i+1 < len(s.subst); i += 2 {
		back[i], back[i+1] = s.subst[i+1], s.subst[i]
	}
	return strings.NewReplacer(back...).Replace(b.String()), cmd.ProcessState.ExitCode()
}

// exiting is run for checkDocTranscript: what a command printed, the
// test failed unless it exited with code.
func (s docShell) exiting(code int) func(string) string {
	return func(command string) string {
		s.t.Helper()
		out, c := s.run(command)
		if c != code {
			s.t.Errorf("%s: exit %d, want %d:\n%s", command, c, code, out)
		}
		return out
	}
}
