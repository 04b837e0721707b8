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

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/client/sidecarclient"
	"github.com/allot-io/allot/internal/loopback"
	"github.com/allot-io/allot/internal/spawn"
	"github.com/redis/go-redis/v9"
)

// sidecar is an `allot agent` process, standalone on the workload's rules.
type sidecar struct {
	cmd  *exec.Cmd
	url  string
	http *http.Client
	unix *http.Client // the same endpoints over --http-socket
	// stream and streamUnix ask over gRPC CheckStream (--grpc-addr and
	// --grpc-socket), coalescing concurrent checks into batches.
	stream, streamUnix *sidecarclient.Client
	// resp asks ALLOT.CHECK over the Redis protocol (--resp-addr), with
	// the same go-redis client as Redis's rows; respAddr is its address.
	resp     *redis.Client
	respAddr string
}

func startSidecar(ctx context.Context, bin, dir string, rules int) (*sidecar, error) {
	path := filepath.Join(dir, "rules-"+strconv.Itoa(rules)+".yaml")
	if err := os.WriteFile(path, []byte(rulesYAML(rules)), 0o600); err != nil {
		return nil, err
	}
	ports, err := loopback.Ports(3)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	grpcAddr := "127.0.0.1:" + strconv.Itoa(ports[1])
	respAddr := "127.0.0.1:" + strconv.Itoa(ports[2])
	sock := filepath.Join(dir, "sidecar.sock")
	grpcSock := filepath.Join(dir, "sidecar-grpc.sock")
	cmd := exec.Command(bin, "agent", "--rules", path, "--node-id", "bench", "--http-addr", addr, "--http-socket", sock,
		"--grpc-addr", grpcAddr, "--grpc-socket", grpcSock, "--resp-addr", respAddr, "--log-level", "error")
	cmd.Env = spawn.Env()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &sidecar{cmd: cmd, url: "http://" + addr, respAddr: respAddr,
		resp: redis.NewClient(&redis.Options{Addr: respAddr, PoolSize: 256, Protocol: 2}),
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024}},
		unix: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			}}}}
	if s.stream, err = sidecarclient.New(grpcAddr); err != nil {
		s.stop()
		return nil, err
	}
	if s.streamUnix, err = sidecarclient.New("unix://" + grpcSock); err != nil {
		s.stop()
		return nil, err
	}
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

func (s *sidecar) stop() {
	for _, c := range []*sidecarclient.Client{s.stream, s.streamUnix} {
		if c != nil {
			c.Close()
		}
	}
	terminate(s.cmd, 10*time.Second)
}

// checkStream asks over gRPC CheckStream, on TCP.
func (s *sidecar) checkStream(q *request) (bool, error) { return streamCheck(s.stream, q) }

// checkStreamUnix asks over gRPC CheckStream, on the Unix socket.
func (s *sidecar) checkStreamUnix(q *request) (bool, error) { return streamCheck(s.streamUnix, q) }

func streamCheck(c *sidecarclient.Client, q *request) (bool, error) {
	d, err := c.Check(context.Background(), agent.Request{Tenant: q.tenant, User: q.user, Route: q.route})
	return d.Allowed, err
}

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

// checkRESP asks ALLOT.CHECK over the Redis protocol, one round trip a
// check, as a gateway with any Redis client would.
func (s *sidecar) checkRESP(q *request) (bool, error) {
	v, err := s.resp.Do(context.Background(), "ALLOT.CHECK", "tenant", q.tenant, "user", q.user, "route", q.route).Slice()
	if err != nil {
		return false, err
	}
	ok, _ := v[0].(int64)
	return ok == 1, nil
}
