package main

import (
	"strings"
	"testing"
)

// TestConfigFileStrict: a --config file is read as strictly as the rules
// and tokens files: a flag given twice is an error naming the file and
// line, not the last value silently, and a duration written as another
// tool would (1d) says what to write, wherever it comes from.
func TestConfigFileStrict(t *testing.T) {
	tests := []struct {
		name   string
		config string // written to a file given as --config, "" for none
		vars   map[string]string
		args   []string
		want   string // stderr's first line, FILE standing for the config file
	}{
		{"a flag given twice", "coordinator: 127.0.0.1:1\ntimeout: 5s\ntimeout: 1s\n", nil, nil,
			"allot status: config FILE:3: timeout is given twice (first on line 2)"},
		{"two documents", "timeout: 5s\n---\ntimeout: 1s\n", nil, nil,
			"allot status: config FILE:2: holds more than one YAML document"},
		{"a duration in days, in the file", "coordinator: 127.0.0.1:1\ntimeout: 1d\n", nil, nil,
			`allot status: invalid value for timeout (from FILE:2): "1d": Go durations have no d; use 24h`},
		{"a duration in days, in the environment", "", map[string]string{"ALLOT_TIMEOUT": "7d"}, nil,
			`allot status: invalid value for timeout (from ALLOT_TIMEOUT): "7d": Go durations have no d; use 168h`},
		{"a number without a unit, on the command line", "", nil, []string{"--timeout", "30"},
			`allot status: invalid value "30" for flag -timeout: a duration needs a unit: 30s, 30m or 30h`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"status"}, tt.args...)
			path := ""
			if tt.config != "" {
				path = writeTemp(t, "allot.yaml", tt.config)
				args = append(args, "--config", path)
			}
			code, stdout, stderr := runIn(t, tt.vars, args...)
			first, _, _ := strings.Cut(stderr, "\n")
			if want := strings.ReplaceAll(tt.want, "FILE", path); code != exitUsage || stdout != "" || first != want {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and\n%s", code, stdout, stderr, want)
			}
		})
	}
	// --help still names a duration flag's type.
	if code, stdout, _ := runIn(t, nil, "status", "--help"); code != exitOK || !strings.Contains(stdout, "-timeout duration") {
		t.Errorf("status --help: exit %d:\n%s", code, stdout)
	}
}

// TestRulesFileFirstDayMistakes: allot rules validate names the rule and
// field of a period in days and says what a file without rules: lacks,
// where it printed the YAML decoder's errors.
func TestRulesFileFirstDayMistakes(t *testing.T) {
	const rule = "  - name: daily\n    scope: tenant\n    algorithm: fixed_window\n    limit: 5\n    period: 1m\n    intent: quota\n"
	tests := []struct {
		name, content string
		want          []string // the problems, FILE standing for the file
	}{
		{"period: 1d", "rules:\n" + strings.Replace(rule, "1m", "1d", 1),
			[]string{`FILE:6: rules[daily].period: "1d": Go durations have no d; use 24h`}},
		{"period: 60", "rules:\n" + strings.Replace(rule, "1m", "60", 1),
			[]string{`FILE:6: rules[daily].period: "60": a duration needs a unit: 60s, 60m or 60h`}},
		{"no rules:", rule,
			[]string{`FILE:1: want a top-level rules: list (this file is a list: put "rules:" on a line of its own above it)`}},
		{"a rule without the list", "name: daily\nscope: tenant\n",
			[]string{`FILE:1: want a top-level rules: list (name is a rule's field: put the rule under rules: as a list item, "- name: ...")`}},
		{"rules: twice", "rules:\n" + rule + "rules:\n" + strings.Replace(rule, "daily", "hourly", 1),
			[]string{`FILE:8: rules is given twice (first on line 1); put every rule under one top-level rules: list`}},
		{"a field twice", "rules:\n" + rule + "    limit: 50\n",
			[]string{`FILE:8: rules[daily].limit: is given twice (first on line 5)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeTemp(t, "rules.yaml", tt.content)
			code, stdout, stderr := runIn(t, nil, "rules", "validate", path)
			want := strings.ReplaceAll(strings.Join(tt.want, "\n"), "FILE", path)
			got := strings.Split(strings.TrimSpace(stderr), "\n")
			if code != exitUsage || stdout != "" || strings.Join(got[:len(got)-1], "\n") != want {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant 2 and:\n%s", code, stdout, stderr, want)
			}
		})
	}
}

// TestCoordinatorRefusesTwoTokensLists: the coordinator, given a tokens
// file made by appending allot token's output with >>, refuses to start
// and names the line, where it accepted the file and then refused every
// token of the first list.
func TestCoordinatorRefusesTwoTokensLists(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	tokens := writeTemp(t, "tokens.yaml", "tokens:\n  - name: ops\n    role: admin\n    token: aaaaaaaaaaaaaaaaaaaa\n"+
		"tokens:\n  - name: billing\n    role: reader\n    token: bbbbbbbbbbbbbbbbbbbb\n")
	addrs := loopbackAddrs(t, 2)
	code, _, stderr := runAllot(t, cliEnv(), "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", "", "--auth-tokens", tokens)
	want := tokens + ":5: tokens is given twice (first on line 1): a tokens file holds one tokens: list; put every entry under it (allot token --append " + tokens + " adds one)"
	if code != exitUsage || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
}
