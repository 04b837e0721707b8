package scenario

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// counter is a small script language: set a number, add to it, print it.
func counter() Commands {
	n := 0.0
	var wait time.Duration
	return Commands{
		"set": {Positional: []string{"value"}, Run: func(c *Call) (string, error) {
			_, err := fmt.Sscan(c.Arg(0), &n)
			return "", err
		}},
		"add": {Keys: []string{"n", "every"}, Required: []string{"n"}, Flags: []string{"twice"}, Run: func(c *Call) (string, error) {
			times := 1.0
			if c.Flag("twice") {
				times = 2
			}
			n += times * c.Float("n", 0)
			wait += c.Duration("every", 0)
			return fmt.Sprintf("%g after %v\n", n, wait), nil
		}},
		"sum": {Input: true, Run: func(c *Call) (string, error) {
			return c.Lines(Commands{"add": {Keys: []string{"n"}, Run: func(c *Call) (string, error) {
				n += c.Float("n", 0)
				return fmt.Sprintf("+%g\n", c.Float("n", 0)), nil
			}}})
		}},
		"fail": {Run: func(c *Call) (string, error) { return "", errors.New("the engine refused") }},
		"join": {Lists: []string{"parts"}, Run: func(c *Call) (string, error) {
			return strings.Join(c.List("parts"), "+") + "\n", nil
		}},
	}
}

// TestRunStrict: every mistake a script can make fails the test with the
// line it is on; a correct script passes.
func TestRunStrict(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      string // in the failure; "" for a pass
	}{
		{"passes", "# counting\nset 2\n----\n\nadd n=3 twice every=1s\n----\n8 after 1s\n", ""},
		{"input lines", "sum\nadd n=1\n\n# a comment\nadd n=2\n----\n+1\n+2\n", ""},
		{"lists", "join parts=(a, b, c)\n----\na+b+c\n\njoin parts=x\n----\nx\n", ""},
		{"list without values", "join parts\n----\n", `<string>:1: join: malformed value: parts takes a list (parts=(a, b)) or a value, got parts`},
		{"unknown command", "set 1\n----\n\nsubtract n=1\n----\n", `<string>:4: subtract: unknown command; the commands are add, fail, join, set, sum`},
		{"unknown key", "add n=1 m=2\n----\n1 after 0s\n", `<string>:1: add: unknown argument m=2; add takes n= every= twice`},
		{"malformed number", "\n\nadd n=three\n----\n", `<string>:3: add: malformed value: n=three: strconv.ParseFloat: parsing "three": invalid syntax`},
		{"not finite", "add n=NaN\n----\n", `<string>:1: add: malformed value: n=NaN: not a finite number`},
		{"malformed duration", "add n=1 every=soon\n----\n", `<string>:1: add: malformed value: every=soon: time: invalid duration "soon"`},
		{"missing key", "add every=1s\n----\n", `<string>:1: add: missing argument: n=`},
		{"missing positional", "set\n----\n", `<string>:1: set: missing argument: value`},
		{"key given twice", "add n=1 n=2\n----\n", `<string>:1: add: malformed value: n is given twice`},
		{"flag with a value", "add n=1 twice=yes\n----\n", `<string>:1: add: malformed value: twice is a flag and takes no value, got twice=yes`},
		{"key without a value", "add n\n----\n", `<string>:1: add: malformed value: n takes one value (n=...), got n`},
		{"forgotten separator", "set 1\nadd n=1\n----\n2 after 0s\n", `<string>:1: set: takes no input (is the ---- after it missing?)`},
		{"missing expected block", "set 1\n----\n\nadd n=1\n", "<string>:4:\n  add n=1\n\nexpected:\n\nfound:\n  2 after 0s"},
		{"wrong output", "add n=1\n----\n3 after 0s\n", "expected:\n  3 after 0s\n\nfound:\n  1 after 0s"},
		{"command error", "fail\n----\n", `<string>:1: fail: the engine refused`},
		{"bad input line", "sum\nadd n=1\nadd n=x\n----\n", `<string>:3: add: malformed value: n=x`},
		{"unknown input command", "sum\n\nadd n=1\nmul n=1\n----\n", `<string>:4: mul: unknown command; the commands are add`},
		{"unparsable line", "add n=(1\n----\n", `<string>:1: cannot parse directive at column 7: add n=(1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Failure(t, tc.src, counter())
			switch {
			case tc.want == "" && got != "":
				t.Fatalf("the script failed:\n%s", got)
			case tc.want != "" && got == "":
				t.Fatalf("the script passed; want a failure with %q", tc.want)
			case !strings.Contains(got, tc.want):
				t.Fatalf("the failure is\n%s\nwant it to contain\n%s", got, tc.want)
			}
		})
	}
}

// TestBindErrorKinds: each mistake wraps its sentinel.
func TestBindErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want error
	}{
		{"nope", ErrUnknownCommand},
		{"add n=1 x=1", ErrUnknownArgument},
		{"add every=1s", ErrMissingArgument},
		{"add n=(1, 2)", ErrBadValue},
		{"set 1\ninput", ErrUnexpectedInput},
	} {
		first, _, _ := strings.Cut(tc.src, "\n")
		if got := Failure(t, tc.src+"\n----\n", counter()); !strings.Contains(got, tc.want.Error()) {
			t.Errorf("%s: failure %q; want %v", first, got, tc.want)
		}
	}
}

// TestRewrite: with -rewrite the file gets every command's actual output,
// and is then the passing test.
func TestRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "count.txt")
	src := "# counting\nset 1\n----\n\nadd n=2\n----\nwrong\n\nadd n=1\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	f := flag.Lookup("rewrite")
	if f == nil {
		t.Fatal("datadriven's -rewrite flag is not registered")
	}
	if err := f.Value.Set("true"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set("false") })
	RunFile(t, path, counter())
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "# counting\nset 1\n----\n\nadd n=2\n----\n3 after 0s\n\nadd n=1\n----\n4 after 0s\n"
	if string(got) != want {
		t.Fatalf("rewritten:\n%s\nwant:\n%s", got, want)
	}
	if err := f.Value.Set("false"); err != nil {
		t.Fatal(err)
	}
	RunFile(t, path, counter())
}
