package main

import (
	"strings"
	"testing"
)

// TestConfigErrorNamesWhereValuesCameFrom: a server refused for its
// configuration says which of its flags were set outside the command
// line. An operator who exported ALLOT_CA and ALLOT_TOKEN_FILE for the
// client commands (docs/security.md, step 6) and started a coordinator in
// the same shell saw "TLS: CAFile needs CertFile and KeyFile" for a --ca
// they never gave it.
func TestConfigErrorNamesWhereValuesCameFrom(t *testing.T) {
	config := writeTemp(t, "coordinator.yaml", "ca: /etc/allot/ca.pem\n")
	tests := []struct {
		name string
		vars map[string]string
		args []string
		want string // in stderr
	}{
		{"coordinator, from the environment",
			map[string]string{"ALLOT_CA": "/etc/allot/ca.pem", "ALLOT_TOKEN_FILE": "/home/ops/.allot/ops.token"},
			[]string{"coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap"},
			"CAFile needs CertFile and KeyFile (set outside the command line: --ca from ALLOT_CA, --token-file from ALLOT_TOKEN_FILE)"},
		{"coordinator, from a config file",
			nil,
			[]string{"coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap", "--config", config},
			"CAFile needs CertFile and KeyFile (set outside the command line: --ca from " + config + ":1)"},
		{"coordinator, on the command line",
			nil,
			[]string{"coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap", "--ca", "/etc/allot/ca.pem"},
			"CAFile needs CertFile and KeyFile\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runIn(t, tt.vars, tt.args...)
			if code != exitUsage || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tt.want)
			}
		})
	}
}
