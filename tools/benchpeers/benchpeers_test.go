package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBenchPeersShort runs the harness briefly against real processes (a
// redis-server and an allot sidecar) and checks that it prints every row.
// It asserts no figure: this machine is shared, and speed is measured by
// make bench-peers, not by tests.
func TestBenchPeersShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and an allot sidecar")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("ALLOT_PEER_TESTS") != "" {
			t.Fatal("redis-server is missing (make gateways-deps installs it)")
		}
		t.Skip("redis-server is not installed")
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := config{duration: 200 * time.Millisecond, seq: 300, warm: 3000, clients: []int{8}}
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"HTTP POST /v1/check, sequential, p50 / p99 / p99.9", "gRPC CheckStream (--grpc-addr), 8 clients: checks/s", "server CPU per check", "loopback TCP echo", "RESP ALLOT.CHECK, go-redis, 8 clients", "redis-benchmark -P 16", "x/time/rate", "Zipf(1.1): 1 →", "goals missed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	t.Log(out.String())
}
