package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/sidecarclient"
)

// TestAgentSocket runs `allot agent --http-socket` as a process: checks
// are answered over the Unix socket, its mode is 0660, a stale socket left
// behind is replaced, and the socket is removed on exit.
func TestAgentSocket(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an allot process")
	}
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte("rules:\n  - {name: per-tenant, scope: tenant, algorithm: fixed_window, limit: 2, period: 1m, intent: quota}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "allot.sock")
	stale, err := net.Listen("unix", sock) // a socket a crashed sidecar left
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	addrs := loopbackAddrs(t, 1)
	p := startDaemon(t, "sidecar", cliEnv(), allotBinary(t), "agent", "--rules", rulesFile, "--node-id", "gw-1",
		"--http-addr", addrs[0], "--http-socket", sock)
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	post := func() (int, string) {
		resp, err := client.Post("http://sidecar/v1/check", "application/json", strings.NewReader(`{"tenant":"acme"}`))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	eventually(t, "the socket", []*process{p}, func() (bool, string) {
		code, body := post()
		return code == http.StatusOK, body
	})
	if code, _ := post(); code != http.StatusOK {
		t.Fatalf("second check: %d", code)
	}
	if code, body := post(); code != http.StatusTooManyRequests {
		t.Fatalf("third check over the socket: %d %s; want 429", code, body)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v %v; want 0660", fi.Mode(), err)
	}
	p.stop(t)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the socket is still there after exit: %v", err)
	}
}

// TestAgentGRPCSidecar runs `allot agent --grpc-addr --grpc-socket` as a
// process and checks through the sidecar client over both: one quota,
// shared by the two listeners, and the socket removed on exit.
func TestAgentGRPCSidecar(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an allot process")
	}
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte("rules:\n  - {name: per-tenant, scope: tenant, algorithm: fixed_window, limit: 3, period: 1m, intent: quota}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "grpc.sock")
	addrs := loopbackAddrs(t, 2)
	p := startDaemon(t, "sidecar", cliEnv(), allotBinary(t), "agent", "--rules", rulesFile, "--node-id", "gw-1",
		"--http-addr", addrs[0], "--grpc-addr", addrs[1], "--grpc-socket", sock)
	overTCP, err := sidecarclient.New(addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer overTCP.Close()
	overSocket, err := sidecarclient.New("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	defer overSocket.Close()
	check := func(c *sidecarclient.Client) (agent.Decision, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Check(ctx, agent.Request{Tenant: "acme"})
	}
	eventually(t, "the gRPC sidecar", []*process{p}, func() (bool, string) {
		d, err := check(overTCP)
		return err == nil && d.Allowed, fmt.Sprint(d, err)
	})
	for i, c := range []*sidecarclient.Client{overSocket, overTCP} {
		if d, err := check(c); err != nil || !d.Allowed {
			t.Fatalf("check %d: %+v, %v", i+2, d, err)
		}
	}
	if d, err := check(overSocket); err != nil || d.Allowed || d.Rule != "per-tenant" || d.RetryAfter <= 0 {
		t.Fatalf("fourth check, over the quota: %+v, %v", d, err)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v %v; want 0660", fi.Mode(), err)
	}
	p.stop(t)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the socket is still there after exit: %v", err)
	}
}
