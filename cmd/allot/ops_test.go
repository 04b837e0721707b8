package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allot-io/allot/internal/testwait"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/billing"
	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
)

// runIn runs the CLI in-process with vars as its whole environment and
// returns the exit code and what it wrote.
func runIn(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e := &env{args: args, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
		getenv: func(k string) string { return vars[k] }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := run(ctx, e)
	return code, stdout.String(), stderr.String()
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 30, 15, 500, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr string
	}{
		{in: "now", want: now},
		{in: " now ", want: now},
		{in: "2026-11-29T10:00:00Z", want: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)},
		{in: "2026-11-29T11:00:00+01:00", want: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)},
		{in: "2026-11-29T10:00:00.25Z", want: time.Date(2026, 11, 29, 10, 0, 0, 250_000_000, time.UTC)},
		{in: "2026-11-01", want: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)},
		{in: "24h", want: now.Add(-24 * time.Hour)},
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: "1h30m", want: now.Add(-90 * time.Minute)},
		{in: "0s", want: now},
		{in: "7d", want: now.Add(-7 * 24 * time.Hour)},
		{in: "-1h", wantErr: "must not be negative"},
		{in: "yesterday", wantErr: "want an RFC 3339 time"},
		{in: "", wantErr: "want an RFC 3339 time"},
		{in: "1.5d", wantErr: "want an RFC 3339 time"},
		{in: "2026-13-01", wantErr: "want an RFC 3339 time"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseTime(tt.in, now)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseTime(%q) = %v, %v; want an error with %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !got.Equal(tt.want) {
				t.Fatalf("parseTime(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestClusterListFlag(t *testing.T) {
	tests := []struct {
		name    string
		sets    []string
		want    [][]string
		wantErr bool
	}{
		{name: "default", want: [][]string{{"127.0.0.1:7400"}}},
		{name: "one cluster replaces the default", sets: []string{"a:1,b:1"}, want: [][]string{{"a:1", "b:1"}}},
		{name: "repeated", sets: []string{"a:1,b:1", " c:1 "}, want: [][]string{{"a:1", "b:1"}, {"c:1"}}},
		{name: "semicolons, as from the environment", sets: []string{"a:1,b:1;c:1"}, want: [][]string{{"a:1", "b:1"}, {"c:1"}}},
		{name: "empty", sets: []string{" , "}, wantErr: true},
		{name: "empty cluster", sets: []string{"a:1;"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clusterList{lists: [][]string{{"127.0.0.1:7400"}}, dflt: true}
			var err error
			for _, s := range tt.sets {
				if err = c.Set(s); err != nil {
					break
				}
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("Set: %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(c.lists, tt.want) {
				t.Fatalf("lists %q, want %q", c.lists, tt.want)
			}
		})
	}
}

// billCSVHeader and allRegions are the columns of 'allot usage --format
// csv' and the region of its total lines, for the tests reading it.
var billCSVHeader = billing.CSVHeader()

const allRegions = billing.AllRegions

// TestUsageNamesTheFlagsThatCountedTwice: a line two clusters counted is
// refused naming the --coordinator flags that gave it, and what to do.
func TestUsageNamesTheFlagsThatCountedTwice(t *testing.T) {
	w := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	line := billing.LedgerLine{Line: ledger.Line{Key: ledger.Key{Window: w.Unix(), Tenant: "acme", Rule: "quota", Region: "eu"}, WindowSeconds: 3600, Admitted: 1}}
	again := line
	again.Source = 2
	_, err := billing.Merge([]billing.LedgerLine{again, line})
	want := "tenant acme, rule quota, region eu, window 2026-11-29T10:00:00Z was counted by two clusters (--coordinator #1 and #3): give each region's cluster once"
	if got := mergeError(err); got == nil || got.Error() != want {
		t.Errorf("mergeError(%v) = %v\nwant %s", err, got, want)
	}
	other := errors.New("other")
	if got := mergeError(other); got != other {
		t.Errorf("mergeError(another error) = %v, want it unchanged", got)
	}
}

// ruleText is a valid rule at a known place in a file: its name on line
// 2, and each field on the next line, ending with intent on line 7.
func ruleText(name string) string {
	return fmt.Sprintf("  - name: %s\n    scope: tenant\n    algorithm: fixed_window\n    limit: 5\n    period: 1m\n    intent: quota\n", name)
}

func TestRulesValidate(t *testing.T) {
	good := "../../docs/examples/rules.yaml"
	if code, stdout, stderr := runIn(t, nil, "rules", "validate", good); code != exitOK || stdout != "ok: 5 rules\n" {
		t.Fatalf("validate %s: exit %d, stdout %q, stderr %q", good, code, stdout, stderr)
	}
	tests := []struct {
		name    string
		content string
		want    []string // "FILE" stands for the file's path
	}{
		{"unknown field", "rules:\n" + ruleText("a") + "    colour: blue\n",
			[]string{"FILE:8: colour: unknown field"}},
		{"missing limit", "rules:\n" + strings.Replace(ruleText("a"), "    limit: 5\n", "", 1),
			[]string{"FILE:2: rules[a].limit: is required"}},
		{"negative period", "rules:\n" + strings.Replace(ruleText("a"), "period: 1m", "period: -1s", 1),
			[]string{"FILE:6: rules[a].period: must be positive, got -1s"}},
		{"duplicate name", "rules:\n" + ruleText("a") + ruleText("a"),
			[]string{"FILE:8: rules[a].name: duplicate rule name"}},
		{"every problem", "rules:\n" + strings.Replace(ruleText("a"), "    limit: 5\n", "", 1) + strings.Replace(ruleText("b"), "period: 1m", "period: -1s", 1),
			[]string{"FILE:2: rules[a].limit: is required", "FILE:11: rules[b].period: must be positive"}},
		{"unknown algorithm", "rules:\n" + strings.Replace(ruleText("a"), "fixed_window", "leaky", 1),
			[]string{"FILE:4: rules[a].algorithm: unknown algorithm \"leaky\""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeTemp(t, "rules.yaml", tt.content)
			code, stdout, stderr := runIn(t, nil, "rules", "validate", path)
			if code != exitUsage || stdout != "" {
				t.Fatalf("exit %d, stdout %q; want 2 and nothing", code, stdout)
			}
			got := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(got) != len(tt.want)+1 {
				t.Fatalf("stderr has %d lines, want %d problems and a summary:\n%s", len(got), len(tt.want), stderr)
			}
			for i, w := range tt.want {
				if w = strings.ReplaceAll(w, "FILE", path); !strings.HasPrefix(got[i], w) {
					t.Errorf("line %d: %q\nwant it to start %q", i+1, got[i], w)
				}
			}
			if summary := got[len(got)-1]; !strings.HasPrefix(summary, "allot rules: "+path+": ") {
				t.Errorf("summary %q", summary)
			}
		})
	}
	if code, _, stderr := runIn(t, nil, "rules", "validate", filepath.Join(t.TempDir(), "missing.yaml")); code != exitUsage || !strings.Contains(stderr, "no such file") {
		t.Errorf("a missing file: exit %d, %q", code, stderr)
	}
}

// TestRulesRoundTrip: what 'rules get' prints, in both formats, reads
// back as the same rules.
func TestRulesRoundTrip(t *testing.T) {
	want, err := rules.Load("../../docs/examples/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tol := 0.25
	want = append(want, rules.Rule{Name: "odd", Scope: rules.Route, Key: []rules.Attr{rules.AttrTenant, rules.AttrRoute},
		Algorithm: 1, Limit: 7, Period: 90 * time.Minute, Intent: 2, Tolerance: &tol, FailMode: 2,
		Match: rules.Match{Tenants: []string{"acme"}, Plans: []string{"pro"}}, Regions: map[string]float64{"eu": 0.6, "us": 0.4},
		Tenants: map[string]rules.TenantOverride{"acme": {Weight: 2}}})
	for _, format := range []string{"yaml", "json"} {
		t.Run(format, func(t *testing.T) {
			var out bytes.Buffer
			if format == "yaml" {
				err = writeRulesYAML(&out, 42, false, want)
			} else {
				err = writeRulesJSON(&out, want)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := rules.Parse("out."+format, out.Bytes())
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("read back:\n%+v\nwant:\n%+v\nfrom:\n%s", got, want, out.String())
			}
			if format == "yaml" && (!strings.HasPrefix(out.String(), "# Allot rules at version 42: 6 rules.\n") ||
				!strings.Contains(out.String(), "period: 1h30m\n") || !strings.Contains(out.String(), "free: {weight: 1}")) {
				t.Errorf("YAML not as people write it:\n%s", out.String())
			}
		})
	}
}

// TestRulesFromClusterNamesWhatItCannotRead: 'rules get' refuses a rule
// it cannot read, naming it and the field, rather than writing a rule the
// cluster does not enforce.
func TestRulesFromClusterNamesWhatItCannotRead(t *testing.T) {
	good := &allotpb.Rule{Name: "quota", Scope: "tenant", Algorithm: "fixed_window", Limit: 5,
		Period: durationpb.New(time.Minute), Intent: "quota"}
	if list, err := fromCluster([]*allotpb.Rule{good}); err != nil || len(list) != 1 || list[0].Name != "quota" || list[0].Period != time.Minute {
		t.Fatalf("fromCluster(a valid rule) = %+v, %v", list, err)
	}
	newer := &allotpb.Rule{Name: "newer", Scope: "tenant", Algorithm: "leaky_bucket", Limit: 5,
		Period: durationpb.New(time.Minute), Intent: "quota"}
	_, err := fromCluster([]*allotpb.Rule{good, newer})
	if err == nil || !strings.Contains(err.Error(), `rule "newer"`) || !strings.Contains(err.Error(), `algorithm: unknown algorithm "leaky_bucket"`) ||
		!strings.Contains(err.Error(), "older than the cluster") {
		t.Errorf("fromCluster(a rule of a newer cluster): %v", err)
	}
}

// TestFlagPrecedence: the command line wins over ALLOT_* variables, which
// win over the --config file. status refuses a bad --format before it
// dials, naming the value it got, which shows where the value came from.
func TestFlagPrecedence(t *testing.T) {
	cfg := writeTemp(t, "allot.yaml", "format: from-file\ntimeout: 3s\n")
	tests := []struct {
		name    string
		vars    map[string]string
		args    []string
		code    int
		wantErr string
	}{
		{"command line beats env and file", map[string]string{"ALLOT_FORMAT": "from-env"},
			[]string{"--config", cfg, "--format", "from-flag"}, exitUsage, `--format "from-flag"`},
		{"env beats file", map[string]string{"ALLOT_FORMAT": "from-env"},
			[]string{"--config", cfg}, exitUsage, `--format "from-env"`},
		{"file alone", nil, []string{"--config", cfg}, exitUsage, `--format "from-file"`},
		{"file named by ALLOT_CONFIG", map[string]string{"ALLOT_CONFIG": cfg}, nil, exitUsage, `--format "from-file"`},
		{"bad env value names the variable", map[string]string{"ALLOT_TIMEOUT": "soon"}, nil, exitUsage, "timeout (from ALLOT_TIMEOUT)"},
		{"unknown config key names file and line", nil,
			[]string{"--config", writeTemp(t, "bad.yaml", "format: json\nbogus: 1\n")}, exitUsage, `bad.yaml:2: unknown flag "bogus"`},
		{"config that is not a mapping", nil,
			[]string{"--config", writeTemp(t, "list.yaml", "- format\n")}, exitUsage, "list.yaml:1: want a mapping"},
		{"missing config file", nil, []string{"--config", "/nonexistent/allot.yaml"}, exitUsage, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runIn(t, tt.vars, append([]string{"status"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tt.code, tt.wantErr)
			}
		})
	}
}

func TestExitCodes(t *testing.T) {
	closed := "127.0.0.1:1" // nothing listens on port 1
	tests := []struct {
		args   []string
		code   int
		stdout string // a substring of stdout, or of stderr:
		stderr string
	}{
		{args: nil, code: exitUsage, stderr: "usage: allot <command>"},
		{args: []string{"--help"}, code: exitOK, stderr: "commands:"},
		{args: []string{"frobnicate"}, code: exitUsage, stderr: `unknown command "frobnicate"`},
		{args: []string{"rules"}, code: exitUsage, stderr: "missing subcommand"},
		{args: []string{"rules", "--help"}, code: exitOK, stdout: "validate FILE"},
		{args: []string{"rules", "frob"}, code: exitUsage, stderr: `unknown subcommand "frob"`},
		{args: []string{"rules", "get", "--help"}, code: exitOK, stdout: "usage: allot rules get [NAME]"},
		{args: []string{"rules", "get", "--format", "xml"}, code: exitUsage, stderr: `--format "xml"`},
		{args: []string{"rules", "get", "a", "b"}, code: exitUsage, stderr: "at most one rule name"},
		{args: []string{"rules", "get", "--bogus"}, code: exitUsage, stderr: "flag provided but not defined: -bogus"},
		{args: []string{"rules", "put"}, code: exitUsage, stderr: "want one rules file"},
		{args: []string{"rules", "put", "--help"}, code: exitOK, stdout: "-replace-all"},
		{args: []string{"rules", "delete"}, code: exitUsage, stderr: "want one rule name"},
		{args: []string{"rules", "validate"}, code: exitUsage, stderr: "want one rules file"},
		{args: []string{"status", "--help"}, code: exitOK, stdout: "usage: allot status"},
		{args: []string{"status", "extra"}, code: exitUsage, stderr: `unexpected argument "extra"`},
		{args: []string{"status", "--coordinator", closed, "--timeout", "5s"}, code: exitFailure, stderr: "no coordinator answered"},
		{args: []string{"rules", "get", "--coordinator", closed, "--timeout", "5s"}, code: exitFailure, stderr: "no coordinator answered"},
		{args: []string{"usage", "--help"}, code: exitOK, stdout: "-coordinator value"},
		{args: []string{"usage"}, code: exitUsage, stderr: "--from is required"},
		{args: []string{"usage", "--from", "2h", "--format", "xml"}, code: exitUsage, stderr: `--format "xml"`},
		{args: []string{"usage", "--from", "soon"}, code: exitUsage, stderr: `--from: "soon"`},
		{args: []string{"usage", "--from", "1h", "--to", "2h"}, code: exitUsage, stderr: "is not before --to"},
		{args: []string{"usage", "--from", "1h", "--coordinator", ";"}, code: exitUsage, stderr: "names no address"},
		{args: []string{"usage", "--from", "1h", "--coordinator", closed, "--timeout", "5s"}, code: exitFailure, stderr: "no coordinator answered"},
		{args: []string{"cluster"}, code: exitUsage, stderr: "missing subcommand"},
		{args: []string{"cluster", "--help"}, code: exitOK, stdout: "backup FILE"},
		{args: []string{"cluster", "remove"}, code: exitUsage, stderr: "want one member ID"},
		{args: []string{"cluster", "backup"}, code: exitUsage, stderr: "want one backup file"},
		{args: []string{"cluster", "backup", "--help"}, code: exitOK, stdout: "usage: allot cluster backup FILE"},
		{args: []string{"cluster", "restore", "/nonexistent/backup.snap"}, code: exitUsage, stderr: "no such file"},
		{args: []string{"cluster", "remove", "c9", "--coordinator", closed, "--timeout", "5s"}, code: exitFailure, stderr: "no coordinator answered"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runIn(t, nil, tt.args...)
			if code != tt.code || !strings.Contains(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q\nwant exit %d, stdout with %q, stderr with %q", code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

func TestParseArgsInterspersed(t *testing.T) {
	tests := []struct {
		args       []string
		positional []string
		format     string
		replace    bool
	}{
		{[]string{"a"}, []string{"a"}, "yaml", false},
		{[]string{"a", "--format", "json"}, []string{"a"}, "json", false},
		{[]string{"--format", "json", "a"}, []string{"a"}, "json", false},
		{[]string{"a", "--replace-all", "b"}, []string{"a", "b"}, "yaml", true},
		{[]string{"--format=json", "a", "-replace-all=true"}, []string{"a"}, "json", true},
		{[]string{"--", "--format"}, []string{"--format"}, "yaml", false},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			e := &env{args: tt.args, stdout: &bytes.Buffer{}, getenv: func(string) string { return "" }}
			f := newFlags(e, "test")
			format := f.String("format", "yaml", "")
			replace := f.Bool("replace-all", false, "")
			got, err := parseArgs(f, e)
			if err != nil || !slices.Equal(got, tt.positional) || *format != tt.format || *replace != tt.replace {
				t.Errorf("parseArgs = %q, %v; format %q, replace-all %v", got, err, *format, *replace)
			}
		})
	}
}

// testCluster is a one-member coordinator cluster in this process.
type testCluster struct {
	c     *coordinator.Coordinator
	addr  string
	token string // the admin token, if the cluster has one
}

func startTestCluster(t *testing.T, id, region, token string) *testCluster {
	t.Helper()
	c, err := coordinator.New(coordinator.Config{
		NodeID: id, DataDir: t.TempDir(), Region: region, Bootstrap: true, AdminToken: token,
		RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		ReportInterval: 200 * time.Millisecond, ApplyWindow: 5 * time.Millisecond,
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		// One-second windows, maintained four times a second, so that a
		// window can become final within the test.
		BillingWindow: time.Second,
	})
	if err != nil {
		t.Fatalf("starting %s: %v", id, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	testwait.For(t, 30*time.Second, id+" to lead", c.IsLeader)
	return &testCluster{c: c, addr: c.GRPCAddr(), token: token}
}

// report sends one agent report carrying one usage count.
func (tc *testCluster) report(t *testing.T, node, region string, count *allotpb.UsageCount, cut time.Time) {
	t.Helper()
	cc, err := grpc.NewClient(tc.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if tc.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tc.token)
	}
	_, err = allotpb.NewAgentServiceClient(cc).Report(ctx, &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: node, Incarnation: 1, Region: region,
		IntervalNano: int64(200 * time.Millisecond),
		Usage:        &allotpb.UsageBatch{Seq: 1, Counts: []*allotpb.UsageCount{count}, CutUnixNano: cut.UnixNano()},
	})
	if err != nil {
		t.Fatalf("report to %s: %v", tc.addr, err)
	}
}

// TestOpsInProcess runs every operator command against real one-member
// clusters in this process: two regions with a ledger each, and a third
// cluster to restore into.
func TestOpsInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts coordinators")
	}
	const token = "s3cret"
	eu := startTestCluster(t, "eu-1", "eu", token)
	us := startTestCluster(t, "us-1", "us", "")
	admin := map[string]string{"ALLOT_ADMIN_TOKEN": token}
	rulesPath := writeTemp(t, "rules.yaml", "rules:\n"+ruleText("quota")+"    regions: {eu: 0.6, us: 0.4}\n")

	t.Run("rules", func(t *testing.T) {
		code, _, stderr := runIn(t, nil, "rules", "put", rulesPath, "--coordinator", eu.addr)
		if code != exitFailure || !strings.Contains(stderr, "not allowed") || !strings.Contains(stderr, "ALLOT_TOKEN_FILE") {
			t.Errorf("put without the token: exit %d, %q", code, stderr)
		}
		for _, tc := range []*testCluster{eu, us} {
			code, stdout, stderr := runIn(t, admin, "rules", "put", rulesPath, "--coordinator", tc.addr)
			if code != exitOK || stdout != "rules version 1 (1 rule): created quota\n" {
				t.Fatalf("put: exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
		}
		code, stdout, stderr := runIn(t, admin, "rules", "get", "--coordinator", eu.addr)
		if code != exitOK || !strings.HasPrefix(stdout, "# Allot rules at version 1: 1 rule.\n") {
			t.Fatalf("get: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		got, err := rules.Parse("got.yaml", []byte(stdout))
		if want, _ := rules.Load(rulesPath); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("get printed rules that read back as %+v, %v; want %+v", got, err, want)
		}
		code, stdout, stderr = runIn(t, admin, "rules", "get", "quota", "--format", "json", "--coordinator", eu.addr)
		if code != exitOK || !json.Valid([]byte(stdout)) || stderr != "rules version 1\n" {
			t.Errorf("get quota --format json: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		code, _, stderr = runIn(t, admin, "rules", "get", "nope", "--coordinator", eu.addr)
		if code != exitFailure || !strings.Contains(stderr, `no rule named "nope"`) {
			t.Errorf("get nope: exit %d, %q", code, stderr)
		}
		code, stdout, _ = runIn(t, admin, "rules", "put", rulesPath, "--coordinator", eu.addr)
		if code != exitOK || stdout != "rules version 1 kept (1 rule): nothing changed\n" {
			t.Errorf("put again: exit %d, %q", code, stdout)
		}
		two := writeTemp(t, "two.yaml", "rules:\n"+ruleText("other"))
		code, stdout, _ = runIn(t, admin, "rules", "put", two, "--replace-all", "--coordinator", eu.addr)
		if code != exitOK || stdout != "rules version 2 (1 rule): created other; deleted quota\n" {
			t.Errorf("put --replace-all: exit %d, %q", code, stdout)
		}
		code, stdout, _ = runIn(t, admin, "rules", "delete", "other", "--coordinator", eu.addr)
		if code != exitOK || stdout != "deleted other: rules version 3 (0 rules)\n" {
			t.Errorf("delete: exit %d, %q", code, stdout)
		}
		code, _, stderr = runIn(t, admin, "rules", "delete", "other", "--coordinator", eu.addr)
		if code != exitFailure || !strings.Contains(stderr, "not found") {
			t.Errorf("delete again: exit %d, %q", code, stderr)
		}
		if code, _, stderr = runIn(t, admin, "rules", "put", rulesPath, "--coordinator", eu.addr); code != exitOK {
			t.Fatalf("put back: %q", stderr)
		}
		empty := writeTemp(t, "empty.yaml", "rules: []\n")
		if code, _, stderr = runIn(t, admin, "rules", "put", empty, "--replace-all", "--coordinator", eu.addr); code != exitUsage || !strings.Contains(stderr, "holds no rules") {
			t.Errorf("put of an empty file: exit %d, %q", code, stderr)
		}
	})

	t.Run("status", func(t *testing.T) {
		code, stdout, stderr := runIn(t, admin, "status", "--format", "json", "--coordinator", eu.addr)
		var cs clusterStatus
		if code != exitOK || json.Unmarshal([]byte(stdout), &cs) != nil {
			t.Fatalf("status: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		if cs.Region != "eu" || cs.LeaderID != "eu-1" || cs.Rules != 1 || cs.RulesVersion != 4 || cs.Agents == nil ||
			len(cs.Members) != 1 || !cs.Members[0].Leader || !cs.Members[0].Voter || cs.Members[0].State != "leader" || cs.Members[0].AppliedIndex == 0 {
			t.Errorf("status: %s", stdout)
		}
		code, stdout, _ = runIn(t, admin, "status", "--coordinator", eu.addr)
		if code != exitOK || !strings.Contains(stdout, "region eu: leader eu-1 at "+eu.addr) || !strings.Contains(stdout, "rules: 1 at version 4") ||
			!regexp.MustCompile(`(?m)^eu-1\s+\*\s+yes\s+leader\s+\d+\s+\d+\s+\d+\s+`+regexp.QuoteMeta(eu.addr)).MatchString(stdout) {
			t.Errorf("status table:\n%s", stdout)
		}
	})

	t.Run("usage", func(t *testing.T) {
		// One second window an hour ago, reported in both regions: eu's
		// agent has cut past its end, so it becomes final; us's has not.
		w := time.Now().Add(-time.Hour).Truncate(time.Second)
		eu.report(t, "gw-eu", "eu", &allotpb.UsageCount{Rule: "quota", Tenant: "acme", WindowUnix: w.Unix(), Admitted: 3, Denied: 1}, time.Now())
		us.report(t, "gw-us", "us", &allotpb.UsageCount{Rule: "quota", Tenant: "acme", WindowUnix: w.Unix(), Admitted: 1, Denied: 2}, w)
		args := []string{"usage", "--coordinator", eu.addr, "--coordinator", us.addr, "--from", "2h", "--format", "csv"}
		ws, we := w.UTC().Format(time.RFC3339), w.Add(time.Second).UTC().Format(time.RFC3339)
		// 5 a minute is 1/12 in a one-second window; eu may use 0.6 of it.
		// The window belongs to its minute, counted against 5, without
		// overage.
		terms := "," + w.Truncate(time.Minute).UTC().Format(time.RFC3339) + ",5,0"
		want := billCSVHeader[0] + "," + strings.Join(billCSVHeader[1:], ",") + "\n" +
			ws + "," + we + ",true,acme,quota,eu,3,1,0.7500,0.6,0.05,60.0000," + terms + "\n" +
			ws + "," + we + ",false,acme,quota,us,1,2,0.2500,0.4,0.033,30.0000," + terms + "\n" +
			ws + "," + we + ",false,acme,quota,*,4,3,eu=0.7500;us=0.2500,,0.083,48.0000," + terms + "\n"
		var stdout, stderr string
		testwait.For(t, 30*time.Second, "eu's window to be final", func() bool {
			var code int
			code, stdout, stderr = runIn(t, admin, args...)
			if code != exitOK {
				t.Fatalf("usage: exit %d, %q", code, stderr)
			}
			return strings.Contains(stdout, ",true,acme,quota,eu,")
		})
		if stdout != want {
			t.Errorf("usage CSV:\n%s\nwant:\n%s", stdout, want)
		}
		// Bounds between whole seconds: a window starts on one, and is in
		// [from, to) by its start.
		at := func(d time.Duration) string { return w.Add(d).UTC().Format(time.RFC3339Nano) }
		for _, b := range []struct {
			from, to string
			in       bool
		}{
			{at(-time.Second), at(500 * time.Millisecond), true},
			{at(0), at(time.Second), true},
			{at(-time.Second), at(0), false},
			{at(500 * time.Millisecond), at(2 * time.Second), false},
		} {
			code, stdout, stderr := runIn(t, admin, "usage", "--coordinator", eu.addr, "--from", b.from, "--to", b.to, "--format", "jsonl")
			if code != exitOK || strings.Contains(stdout, `"tenant":"acme"`) != b.in {
				t.Errorf("usage from %s to %s: exit %d, %q, %q; want the window included: %v", b.from, b.to, code, stdout, stderr, b.in)
			}
		}
		code, _, stderr := runIn(t, admin, "usage", "--coordinator", eu.addr, "--coordinator", eu.addr, "--from", "2h")
		if code != exitUsage || !strings.Contains(stderr, "counted by two clusters") {
			t.Errorf("the same cluster twice: exit %d, %q", code, stderr)
		}
		code, stdout, _ = runIn(t, map[string]string{"ALLOT_COORDINATOR": eu.addr + ";" + us.addr, "ALLOT_ADMIN_TOKEN": token}, "usage", "--from", "2h", "--tenant", "acme", "--region", "us")
		if code != exitOK || !strings.Contains(stdout, " us ") || strings.Contains(stdout, " eu ") {
			t.Errorf("usage --region us, clusters from ALLOT_COORDINATOR: exit %d\n%s", code, stdout)
		}
	})

	t.Run("cluster", func(t *testing.T) {
		backup := filepath.Join(t.TempDir(), "eu.snap")
		code, _, stderr := runIn(t, nil, "cluster", "backup", backup, "--coordinator", eu.addr)
		if code != exitFailure || !strings.Contains(stderr, "not allowed") {
			t.Errorf("backup without the token: exit %d, %q", code, stderr)
		}
		if _, err := os.Stat(backup); !os.IsNotExist(err) {
			t.Errorf("a failed backup left %s: %v", backup, err)
		}
		code, stdout, stderr := runIn(t, admin, "cluster", "backup", "--coordinator", eu.addr, backup)
		info, err := os.Stat(backup)
		if code != exitOK || err != nil || info.Size() == 0 || !strings.Contains(stdout, fmt.Sprintf("%d bytes to %s", info.Size(), backup)) {
			t.Fatalf("backup: exit %d, stdout %q, stderr %q, %v", code, stdout, stderr, err)
		}
		if entries, _ := os.ReadDir(filepath.Dir(backup)); len(entries) != 1 {
			t.Errorf("backup left temporary files: %v", entries)
		}
		dr := startTestCluster(t, "dr-1", "eu", "")
		code, stdout, stderr = runIn(t, nil, "cluster", "restore", backup, "--coordinator", dr.addr)
		if code != exitOK || !strings.Contains(stdout, "through leader dr-1") {
			t.Fatalf("restore: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		if code, stdout, _ = runIn(t, nil, "rules", "get", "quota", "--coordinator", dr.addr); code != exitOK || !strings.Contains(stdout, "name: quota") {
			t.Errorf("rules after restore: exit %d\n%s", code, stdout)
		}
		if code, stdout, _ = runIn(t, nil, "usage", "--coordinator", dr.addr, "--from", "2h", "--format", "csv"); code != exitOK || !strings.Contains(stdout, ",acme,quota,eu,3,1,") {
			t.Errorf("ledger after restore: exit %d\n%s", code, stdout)
		}
		// dr-1 has state now: a second restore must name it, and a file
		// that is no backup is refused even so.
		garbage := writeTemp(t, "garbage.snap", "not a backup")
		code, _, stderr = runIn(t, nil, "cluster", "restore", garbage, "--coordinator", dr.addr)
		force := regexp.MustCompile(`--force ([0-9a-f]{32})`).FindStringSubmatch(stderr)
		if code != exitFailure || force == nil {
			t.Fatalf("restoring over state without --force: exit %d, %q", code, stderr)
		}
		if code, _, stderr = runIn(t, nil, "cluster", "restore", garbage, "--force", force[1], "--coordinator", dr.addr); code != exitUsage || !strings.Contains(stderr, "not a valid backup") {
			t.Errorf("restoring garbage: exit %d, %q", code, stderr)
		}
		code, _, stderr = runIn(t, admin, "cluster", "remove", "eu-9", "--coordinator", eu.addr)
		if code != exitFailure || !strings.Contains(stderr, `no member "eu-9"; the members are eu-1 (leader)`) {
			t.Errorf("remove of an unknown member: exit %d, %q", code, stderr)
		}
	})
}
