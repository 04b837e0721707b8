package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretFilesWarn: a coordinator started with secret files every user
// of the host may read (the DSN with a password as `echo … > file` leaves
// it, the tokens file, its own token) says so, naming each flag, file
// and mode, as ssh does for a private key. docs/billing.md's commands
// make the DSN file the coordinator's user's alone, in a directory only
// it enters, and with it the coordinator says nothing.
func TestSecretFilesWarn(t *testing.T) {
	if testing.Short() {
		t.Skip("runs coordinators")
	}
	tokens, files := cliTokens(t, "ops=admin")
	etc := filepath.Join(t.TempDir(), "etc-allot") // /etc/allot, made by the doc's commands
	sink := filepath.Join(etc, "ledger-sink")
	makeSinkFileAsDocSays(t, etc)
	secrets := map[string]string{"ledger-sink-file": sink, "auth-tokens": tokens, "token-file": files["ops"]}
	for _, tt := range []struct {
		name string
		mode os.FileMode // every secret file's; 0: as made
		warn bool
	}{
		{"as docs/billing.md makes them", 0, false},
		{"readable by every user", 0o644, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range secrets {
				if tt.mode == 0 {
					continue
				}
				if err := os.Chmod(path, tt.mode); err != nil {
					t.Fatal(err)
				}
			}
			addrs := loopbackAddrs(t, 3)
			p := startProcess(t, cliEnv(), "c1", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
				"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", addrs[2],
				"--ledger-sink-file", sink, "--auth-tokens", tokens, "--token-file", files["ops"])
			eventually(t, "the coordinator running", []*process{p}, func() (bool, string) {
				return strings.Contains(p.out.String(), "coordinator running"), p.out.String()
			})
			p.stop(t)
			var warned []string
			for l := range strings.SplitSeq(p.out.String(), "\n") {
				if strings.Contains(l, "a secret file is readable by other users") {
					warned = append(warned, l)
				}
			}
			if !tt.warn {
				if len(warned) > 0 {
					t.Errorf("the coordinator warned\n%s", strings.Join(warned, "\n"))
				}
				return
			}
			for flag, path := range secrets {
				line := lineWith(strings.Join(warned, "\n"), "[WARN]", "flag=--"+flag+" ", "file="+path+" ", "mode=0644", `readable_by="every user"`)
				if line == "" {
					t.Errorf("no warning for --%s %s (mode 0644); the secret files' warnings:\n%s", flag, path, strings.Join(warned, "\n"))
				}
			}
			if len(warned) != len(secrets) {
				t.Errorf("%d warnings for %d files:\n%s", len(warned), len(secrets), strings.Join(warned, "\n"))
			}
		})
	}
}

// makeSinkFileAsDocSays runs docs/billing.md's commands that make the
// ledger sink's DSN file, in bash, with etc for /etc/allot and this
// user for allot, and checks what they made: the directory mode 0700,
// the file 0600, holding the DSN. The DSN's host is replaced by one
// where nothing listens: the coordinator opens the sink without
// connecting, and exports only once lines are final.
func makeSinkFileAsDocSays(t *testing.T, etc string) {
	t.Helper()
	data, err := os.ReadFile("../../docs/billing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(data), "\n## Exporting to PostgreSQL\n")
	_, rest, _ = strings.Cut(rest, "\n```sh\n")
	block, _, _ := strings.Cut(rest, "\n```\n")
	var script []string
	for l := range strings.SplitSeq(block, "\n") {
		if strings.HasPrefix(l, "allot coordinator") {
			break
		}
		script = append(script, l)
	}
	if !strings.Contains(strings.Join(script, "\n"), "/etc/allot/ledger-sink") {
		t.Fatalf("docs/billing.md, \"Exporting to PostgreSQL\": no commands making /etc/allot/ledger-sink before allot coordinator in\n%s", block)
	}
	r := strings.NewReplacer("/etc/allot", etc, "-o allot -g allot", "-o $(id -u) -g $(id -g)", "allot:allot", "$(id -u):$(id -g)",
		"db.internal:5432", "127.0.0.1:1", "sslmode=verify-full", "sslmode=disable")
	ctx, cancel := context.WithTimeout(context.Background(), cliDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euc", r.Replace(strings.Join(script, "\n")))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docs/billing.md's commands making the DSN file: %v\n%s\nthey were:\n%s", err, out, r.Replace(strings.Join(script, "\n")))
	}
	for path, want := range map[string]os.FileMode{etc: 0o700, filepath.Join(etc, "ledger-sink"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("docs/billing.md's commands did not make %s: %v", path, err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("docs/billing.md's commands made %s mode %04o; want %04o", path, fi.Mode().Perm(), want)
		}
	}
	if dsn, err := readSinkFile(filepath.Join(etc, "ledger-sink")); err != nil || !strings.HasPrefix(dsn, "postgres://") {
		t.Errorf("the DSN file holds %q, %v", dsn, err)
	}
}
