package main

import (
	"strings"
	"testing"

	"github.com/allot-io/allot/internal/plural"
)

// TestHelpPrefersTokenFiles: the commands' help says what docs/security.md
// says, to present a token from a file (--token-file, ALLOT_TOKEN_FILE),
// not as a value on the command line, which shows in ps and shell history.
func TestHelpPrefersTokenFiles(t *testing.T) {
	for _, args := range [][]string{
		{"rules", "--help"}, {"rules", "get", "--help"}, {"rules", "put", "--help"}, {"rules", "delete", "--help"},
		{"status", "--help"}, {"usage", "--help"},
		{"cluster", "--help"}, {"cluster", "remove", "--help"}, {"cluster", "backup", "--help"}, {"cluster", "restore", "--help"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, _ := runIn(t, nil, args...)
			if code != exitOK || !strings.Contains(stdout, "-token-file") {
				t.Fatalf("exit %d; want the help and --token-file in it:\n%s", code, stdout)
			}
			for _, line := range strings.Split(stdout, "\n") {
				if strings.Contains(line, "ALLOT_ADMIN_TOKEN") && !strings.Contains(line, "ALLOT_TOKEN_FILE") {
					t.Errorf("recommends a token on the command line or in the environment over a token file: %q", line)
				}
			}
			if _, flag, ok := strings.Cut(stdout, "-admin-token string\n"); ok {
				if usage, _, _ := strings.Cut(flag, "\n"); !strings.Contains(usage, "prefer --token-file") {
					t.Errorf("--admin-token's help %q does not point to --token-file", strings.TrimSpace(usage))
				}
			}
		})
	}
}

// TestClientHelpSpeaksAsAClient: the commands that call the cluster (and
// the agent, which calls its coordinators) describe --cert and --ca as a
// client's, and --otlp-endpoint as the command's own trace; only the
// coordinator, which serves its certificate, describes them as served.
func TestClientHelpSpeaksAsAClient(t *testing.T) {
	flagUsage := func(help, name string) string {
		_, rest, ok := strings.Cut(help, "\n  -"+name+" ")
		if !ok {
			return ""
		}
		_, usage, _ := strings.Cut(rest, "\n")
		usage, _, _ = strings.Cut(usage, "\n  -")
		return strings.Join(strings.Fields(usage), " ")
	}
	for _, tt := range []struct {
		args    []string
		serving bool
	}{
		{[]string{"rules", "put", "--help"}, false},
		{[]string{"status", "--help"}, false},
		{[]string{"usage", "--help"}, false},
		{[]string{"overrides", "list", "--help"}, false},
		{[]string{"cluster", "backup", "--help"}, false},
		{[]string{"agent", "--help"}, false},
		{[]string{"coordinator", "--help"}, true},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, _ := runIn(t, nil, tt.args...)
			if code != exitOK {
				t.Fatalf("exit %d:\n%s", code, stdout)
			}
			cert, ca := flagUsage(stdout, "cert"), flagUsage(stdout, "ca")
			if cert == "" || ca == "" {
				t.Fatalf("no --cert or --ca in the help:\n%s", stdout)
			}
			if served := strings.Contains(cert, "serv"); served != tt.serving {
				t.Errorf("--cert: %q speaks of serving: %v, want %v", cert, served, tt.serving)
			}
			if !tt.serving && strings.Contains(ca, "serv") {
				t.Errorf("--ca: %q speaks of serving", ca)
			}
			if !tt.serving && !strings.Contains(cert, "client certificate") {
				t.Errorf("--cert: %q; want it named a client certificate", cert)
			}
			if tt.args[0] == "agent" || tt.serving {
				return
			}
			if otlp := flagUsage(stdout, "otlp-endpoint"); !strings.Contains(otlp, "this command's trace") {
				t.Errorf("--otlp-endpoint: %q; want it about this command's trace", otlp)
			}
		})
	}
}

// TestPlurals: counts the CLI prints agree with their nouns, 1 included.
func TestPlurals(t *testing.T) {
	for _, tt := range []struct {
		n          int
		noun, want string
	}{
		{0, "rule", "0 rules"},
		{1, "rule", "1 rule"},
		{2, "line", "2 lines"},
		{1, "batch", "1 batch"},
		{3, "batch", "3 batches"},
		{2, "policy", "2 policies"},
		{2, "key", "2 keys"},
		{1, "argument", "1 argument"},
	} {
		if got := plural.Count(tt.n, tt.noun); got != tt.want {
			t.Errorf("plural.Count(%d, %q) = %q, want %q", tt.n, tt.noun, got, tt.want)
		}
	}
	var b strings.Builder
	if err := writeStatusTable(&b, &clusterStatus{Region: "eu", Ledger: &ledgerExport{InMemory: 1, ExportedLines: 1, ExportedBatches: 1}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "ledger sink: 1 line exported in 1 batch, nothing yet; 1 line in memory") {
		t.Errorf("status of one line:\n%s", b.String())
	}
	code, _, stderr := runIn(t, nil, "overrides", "put", "tenant-quota")
	if code != exitUsage || !strings.Contains(stderr, "want RULE and TENANT, got 1 argument\n") {
		t.Errorf("overrides put with one argument: exit %d, %q", code, stderr)
	}
}
