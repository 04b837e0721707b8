package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/allot-io/allot/internal/plural"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"github.com/allot-io/allot/rules/envoyconf"
)

const rulesImportAbout = `
Converts another rate limiter's configuration into an Allot rules file.

With --from envoy-ratelimit, each FILE is an envoyproxy/ratelimit
configuration file: one domain and its descriptors. A directory stands
for the .yaml and .yml files in it, as ratelimit reads its config
directory. Every descriptor with a rate_limit becomes a descriptor rule
(scope descriptor) that counts in fixed windows aligned to the unit, as
ratelimit counts; rules keep ratelimit's names, or are named after its
metrics keys (domain.key_value.subkey).

The rules file goes to --out, or to stdout; warnings go to stderr.
Nothing is written unless every file converts: otherwise each problem is
printed as file:line: domain D: descriptor: message, and the command
exits with 2. Then check the result with 'allot rules validate' and
apply it with 'allot rules put'. docs/gateways.md has the field mapping
and what differs from ratelimit.`

func rulesImportFlags(f *flags) runFunc {
	cmd := f.cmd
	var from, intentName, out string
	var shadow bool
	f.StringVar(&from, "from", "", "the format of the files: envoy-ratelimit (required)")
	f.StringVar(&intentName, "intent", "capacity", "the intent of every imported limit: capacity, quota or abuse")
	f.BoolVar(&shadow, "shadow", false, "make every imported limit a shadow rule, which refuses nothing: try the rules on live traffic first")
	f.StringVar(&out, "out", "", "write the rules file to this file instead of stdout")
	return func(_ context.Context, e *env, args []string) error {
		switch from {
		case "envoy-ratelimit":
		case "":
			return usagef(cmd, "--from is required: envoy-ratelimit")
		default:
			return usagef(cmd, "--from %q: want envoy-ratelimit", from)
		}
		intent, err := lease.ParseIntent(intentName)
		if err != nil {
			return usagef(cmd, "--intent %q: want capacity, quota or abuse", intentName)
		}
		if len(args) == 0 {
			return usagef(cmd, "want at least one configuration file or directory")
		}
		files, err := readImportFiles(args)
		if err != nil {
			return &usageError{err: err}
		}
		list, warnings, err := envoyconf.Import(files, envoyconf.Options{Intent: intent, Shadow: shadow})
		if err != nil {
			var es envoyconf.Errors
			if !errors.As(err, &es) {
				return err
			}
			for _, p := range es {
				fmt.Fprintf(e.stderr, "%s: %s\n", p.Location, p.Msg)
			}
			return &usageError{err: fmt.Errorf("%s; nothing was written", plural.Count(len(es), "problem"))}
		}
		for _, w := range warnings {
			fmt.Fprintf(e.stderr, "warning: %s\n", w)
		}
		var buf bytes.Buffer
		command := "allot rules import --from envoy-ratelimit --intent " + intent.String()
		if shadow {
			command += " --shadow"
		}
		if err := writeImportedRules(&buf, command, args, warnings, list); err != nil {
			return err
		}
		// What is written must read back as the same rules: a rules file
		// 'allot rules validate' and 'put' accept.
		back, err := rules.Parse("imported rules", buf.Bytes())
		if err != nil || len(back) != len(list) {
			return fmt.Errorf("the imported rules do not read back (a bug): %v", err)
		}
		if out == "" || out == "-" {
			if _, err := e.stdout.Write(buf.Bytes()); err != nil {
				return fmt.Errorf("writing rules: %w", err)
			}
		} else {
			_, err := writeFileAtomic(out, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err })
			if err == nil {
				err = os.Chmod(out, 0o644) // a rules file, not a secret
			}
			if err != nil {
				return fmt.Errorf("writing rules: %w", err)
			}
		}
		fmt.Fprintf(e.stderr, "imported %s from %s%s\n", plural.Count(len(list), "rule"), plural.Count(len(files), "file"), importedWhere(out))
		return nil
	}
}

func importedWhere(out string) string {
	if out == "" || out == "-" {
		return ""
	}
	return " into " + out
}

// readImportFiles reads the files named, a directory standing for the
// .yaml and .yml files in it (not those starting with a dot).
func readImportFiles(args []string) ([]envoyconf.File, error) {
	var paths []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, fmt.Errorf("reading configuration: %w", err)
		}
		if !st.IsDir() {
			paths = append(paths, a)
			continue
		}
		entries, err := os.ReadDir(a)
		if err != nil {
			return nil, fmt.Errorf("reading configuration: %w", err)
		}
		n := len(paths)
		for _, de := range entries {
			name := de.Name()
			if de.Type().IsRegular() && !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
				paths = append(paths, filepath.Join(a, name))
			}
		}
		if len(paths) == n {
			return nil, fmt.Errorf("reading configuration: %s holds no .yaml or .yml files", a)
		}
	}
	files := make([]envoyconf.File, 0, len(paths))
	for _, p := range paths {
		data, err := readLimited(p, envoyconf.MaxFileSize+1)
		if err != nil {
			return nil, fmt.Errorf("reading configuration: %w", err)
		}
		files = append(files, envoyconf.File{Name: p, Data: data})
	}
	return files, nil
}

// readLimited reads at most n bytes of a file: enough to tell it is too
// big without reading all of it.
func readLimited(path string, n int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return io.ReadAll(io.LimitReader(fh, n))
}

// writeImportedRules writes a rules file, as 'allot rules get' does, with
// a header saying where its rules came from.
func writeImportedRules(w io.Writer, command string, args []string, warnings []envoyconf.Warning, list []rules.Rule) error {
	var domains []string
	count := map[string]int{}
	for _, r := range list {
		if count[r.Match.Domain] == 0 {
			domains = append(domains, r.Match.Domain)
		}
		count[r.Match.Domain]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Allot rules imported from envoyproxy/ratelimit configuration:\n#   %s", comment(command))
	for _, a := range args {
		b.WriteString(" " + comment(a))
	}
	b.WriteString("\n")
	if len(domains) > 0 {
		b.WriteString("# Domains:")
		for i, d := range domains {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %s (%s)", comment(d), plural.Count(count[d], "rule"))
		}
		b.WriteString(".\n")
	}
	if len(warnings) > 0 {
		fmt.Fprintf(&b, "# %s:\n", plural.Count(len(warnings), "warning"))
		for _, wn := range warnings {
			fmt.Fprintf(&b, "#   %s\n", comment(wn.String()))
		}
	}
	b.WriteString("# Each rule's description names the file and line it came from.\n")
	b.WriteString("# Check with 'allot rules validate FILE'; apply with 'allot rules put FILE'.\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing rules: %w", err)
	}
	return rules.WriteYAML(w, list)
}

// comment makes text safe to put in a YAML comment: one line.
func comment(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0x85 || r == 0x2028 || r == 0x2029 {
			return '?'
		}
		return r
	}, s)
}
