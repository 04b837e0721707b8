package main

import (
	"strings"
	"testing"
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
