package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/allot-io/allot/cmd/internal/spawn"
)

// sidecar is an `allot agent` process, standalone on the workload's rules.
type sidecar struct {
	cmd  *exec.Cmd
	url  string
	http *http.Client
	unix *http.Client // the same endpoints over --http-socket
}

func startSidecar(ctx context.Context, bin, dir string, rules int) (*sidecar, error) {
	path := filepath.Join(dir, "rules-"+strconv.Itoa(rules)+".yaml")
	if err := os.WriteFile(path, []byte(rulesYAML(rules)), 0o600); err != nil {
		return nil, err
	}
	ports, err := spawn.LoopbackPorts(1)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	sock := filepath.Join(dir, "sidecar.sock")
	cmd := exec.Command(bin, "agent", "--rules", path, "--node-id", "bench", "--http-addr", addr, "--http-socket", sock, "--log-level", "error")
	cmd.Env = spawn.Env()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &sidecar{cmd: cmd, url: "http://" + addr,
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024}},
		unix: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			}}}}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := s.http.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("the sidecar on %s did not become healthy: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *sidecar) stop() { terminate(s.cmd, 10*time.Second) }

// check posts one request to /v1/check over TCP.
func (s *sidecar) check(q *request) (bool, error) { return s.post(s.http, q) }

// checkUnix posts one request to /v1/check over the Unix socket.
func (s *sidecar) checkUnix(q *request) (bool, error) { return s.post(s.unix, q) }

func (s *sidecar) post(c *http.Client, q *request) (bool, error) {
	resp, err := c.Post(s.url+"/v1/check", "application/json", bytes.NewReader(q.body))
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var d struct {
		Allowed bool `json:"allowed"`
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		b, _ := io.ReadAll(resp.Body)
		return false, fmt.Errorf("/v1/check: %s: %s", resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return false, err
	}
	return d.Allowed, nil
}
