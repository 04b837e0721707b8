package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/allot-io/allot/internal/plural"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"github.com/allot-io/allot/rules/envoyconf"
)

// importTestdata holds envoyproxy/ratelimit configuration files: api.yaml
// and edge.yaml.
const importTestdata = "../../rules/envoyconf/testdata"

// TestRulesImport converts configuration files as a user does, and checks
// that the file written is a rules file holding what envoyconf.Import
// makes of them.
func TestRulesImport(t *testing.T) {
	api, edge := filepath.Join(importTestdata, "api.yaml"), filepath.Join(importTestdata, "edge.yaml")
	tests := []struct {
		name   string
		args   []string // the files, and flags
		inputs []string // the files the args name
		opts   envoyconf.Options
	}{
		{name: "two files", args: []string{api, edge}, inputs: []string{api, edge}},
		{name: "a directory", args: []string{importTestdata}, inputs: []string{api, edge}},
		{name: "flags after the file", args: []string{edge, "--intent", "quota", "--shadow"}, inputs: []string{edge}, opts: envoyconf.Options{Intent: lease.Quota, Shadow: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "rules.yaml")
			args := append([]string{"rules", "import", "--from", "envoy-ratelimit", "--out", out}, tt.args...)
			code, stdout, stderr := runIn(t, nil, args...)
			if code != exitOK || stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			var files []envoyconf.File
			for _, p := range tt.inputs {
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, envoyconf.File{Name: p, Data: data})
			}
			want, warnings, err := envoyconf.Import(files, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := rules.Load(out)
			if err != nil {
				t.Fatalf("rules.Load: %v", err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d rules written, want %d", len(got), len(want))
			}
			for i := range want {
				if !rules.Equal(&got[i], &want[i]) {
					t.Errorf("rule %d written as\n%+v\nwant\n%+v", i, got[i], want[i])
				}
			}
			// Warnings go to stderr, and into the file's header.
			text, _ := os.ReadFile(out)
			for _, w := range warnings {
				if !strings.Contains(stderr, "warning: "+w.String()+"\n") || !strings.Contains(string(text), "#   "+w.String()+"\n") {
					t.Errorf("warning %q not in stderr %q or the header", w, stderr)
				}
			}
			if !strings.HasPrefix(string(text), "# Allot rules imported from envoyproxy/ratelimit configuration:\n#   allot rules import --from envoy-ratelimit --intent ") {
				t.Errorf("header:\n%s", text)
			}
			if !strings.Contains(stderr, "imported "+plural.Count(len(want), "rule")+" from "+plural.Count(len(tt.inputs), "file")+" into "+out) {
				t.Errorf("stderr %q", stderr)
			}
			if code, stdout, stderr := runIn(t, nil, "rules", "validate", out); code != exitOK || stdout != "ok: "+plural.Count(len(want), "rule")+"\n" {
				t.Errorf("validate: exit %d, %q, %q", code, stdout, stderr)
			}
		})
	}
}

func TestRulesImportStdout(t *testing.T) {
	edge := filepath.Join(importTestdata, "edge.yaml")
	code, stdout, stderr := runIn(t, nil, "rules", "import", "--from", "envoy-ratelimit", edge)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	got, err := rules.Parse("stdout", []byte(stdout))
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	var names []string
	for _, r := range got {
		names = append(names, r.Name)
	}
	want := []string{"edge.remote_address", "edge.remote_address_10.0.0.7", "edge.remote_address_192.0.2._", "edge.remote_address_198.51.100.23"}
	if !slices.Equal(names, want) {
		t.Errorf("rules %q, want %q", names, want)
	}
	if !strings.Contains(stdout, "# Domains: edge (4 rules).\n") || !strings.Contains(stdout, edge+":14, domain edge, descriptors[1], which has no rate limit") {
		t.Errorf("output:\n%s", stdout)
	}
}

func TestRulesImportErrors(t *testing.T) {
	dir := t.TempDir()
	bad := writeTemp(t, "bad.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n  - key: b\n    ratelimit: {}\n")
	dup := writeTemp(t, "dup.yaml", "domain: edge\ndescriptors:\n")
	empty := writeTemp(t, "empty.yaml", "")
	edge := filepath.Join(importTestdata, "edge.yaml")
	out := filepath.Join(dir, "out.yaml")
	tests := []struct {
		args   []string
		code   int
		stderr []string
	}{
		{[]string{edge}, exitUsage, []string{"--from is required: envoy-ratelimit"}},
		{[]string{"--from", "kong", edge}, exitUsage, []string{`--from "kong": want envoy-ratelimit`}},
		{[]string{"--from", "envoy-ratelimit", "--intent", "fast", edge}, exitUsage, []string{`--intent "fast": want capacity, quota or abuse`}},
		{[]string{"--from", "envoy-ratelimit"}, exitUsage, []string{"want at least one configuration file"}},
		{[]string{"--from", "envoy-ratelimit", filepath.Join(dir, "nope.yaml")}, exitUsage, []string{"reading configuration:", "no such file"}},
		{[]string{"--from", "envoy-ratelimit", dir}, exitUsage, []string{"holds no .yaml or .yml files"}},
		{[]string{"--from", "envoy-ratelimit", "--out", out, bad}, exitUsage, []string{
			bad + `:4: domain d: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight"`,
			bad + `:6: domain d: descriptors[1]: unknown field "ratelimit" (did you mean rate_limit?)`,
			"allot rules: 2 problems; nothing was written",
		}},
		{[]string{"--from", "envoy-ratelimit", "--out", out, edge, dup}, exitUsage, []string{
			dup + ":1: domain edge: is also the domain of " + edge + ":4",
			"allot rules: 1 problem; nothing was written",
		}},
		{[]string{"--from", "envoy-ratelimit", "--out", out, empty}, exitUsage, []string{empty + ":1: file is empty"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runIn(t, nil, append([]string{"rules", "import"}, tt.args...)...)
			if code != tt.code || stdout != "" {
				t.Errorf("exit %d, stdout %q; want %d and nothing", code, stdout, tt.code)
			}
			for _, want := range tt.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr %q\nwant it to contain %q", stderr, want)
				}
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("%s written: %v", out, err)
			}
		})
	}
}

func TestRulesImportHelp(t *testing.T) {
	if code, stdout, _ := runIn(t, nil, "rules", "--help"); code != exitOK || !strings.Contains(stdout, "import FILE...") {
		t.Errorf("rules --help: exit %d, %q", code, stdout)
	}
	code, stdout, _ := runIn(t, nil, "rules", "import", "--help")
	if code != exitOK || !strings.Contains(stdout, "usage: allot rules import --from envoy-ratelimit") || !strings.Contains(stdout, "-shadow") {
		t.Errorf("rules import --help: exit %d, %q", code, stdout)
	}
}

// TestCLIRulesImport runs the allot binary, as cli_test.go's tests do:
// import, then validate what was written.
func TestCLIRulesImport(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	out := filepath.Join(t.TempDir(), "imported.yaml")
	code, stdout, stderr := runAllot(t, cliEnv(), "rules", "import", "--from", "envoy-ratelimit", "--out", out, importTestdata)
	if code != exitOK || !strings.Contains(stderr, "imported 11 rules from 2 files into "+out) || !strings.Contains(stderr, "warning: ") {
		t.Fatalf("import: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, stderr := runAllot(t, cliEnv(), "rules", "validate", out); code != exitOK || stdout != "ok: 11 rules\n" {
		t.Errorf("validate: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	bad := writeTemp(t, "bad.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n")
	code, _, stderr = runAllot(t, cliEnv(), "rules", "import", "--from", "envoy-ratelimit", bad)
	if code != exitUsage || !strings.Contains(stderr, bad+":4: domain d: descriptors[0].rate_limit.requests_per_unit: must not be negative, got -1") {
		t.Errorf("bad file: exit %d, stderr %q", code, stderr)
	}
}
