package main

import (
	"net"
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

// TestPortInUseNamesTheFlag: a server whose port another process holds
// (the quick start run twice, the first still in the background) says so
// and names the flag to change, where it said "bind: address already in
// use", or for the Raft port gave a hint about advertised hosts.
func TestPortInUseNamesTheFlag(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	free := loopbackAddrs(t, 3)
	for _, flag := range []string{"raft-addr", "grpc-addr", "http-addr"} {
		t.Run(flag, func(t *testing.T) {
			addrs := map[string]string{"raft-addr": free[0], "grpc-addr": free[1], "http-addr": free[2]}
			addrs[flag] = held.Addr().String()
			code, _, stderr := runIn(t, nil, "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap",
				"--raft-addr", addrs["raft-addr"], "--grpc-addr", addrs["grpc-addr"], "--http-addr", addrs["http-addr"])
			want := "--" + flag + " " + held.Addr().String() + ": the address is in use: another process listens there"
			if code == exitOK || !strings.Contains(stderr, want) || !strings.Contains(stderr, "give --"+flag+" another port") {
				t.Fatalf("exit %d, stderr %q; want %q", code, stderr, want)
			}
		})
	}
}
