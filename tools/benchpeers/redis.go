package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-io/allot/internal/loopback"
)

// tokenBucket is the usual Redis token bucket in Lua: one key's tokens and
// last refill, updated atomically. The client passes the time, as the
// common implementations do.
const tokenBucket = `
local rate, burst, now, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local v = redis.call('HMGET', KEYS[1], 't', 'ts')
local t, ts = tonumber(v[1]), tonumber(v[2])
if t == nil then t, ts = burst, now end
t = math.min(burst, t + math.max(now - ts, 0) * rate)
local ok = 0
if t >= cost then t = t - cost; ok = 1 end
redis.call('HSET', KEYS[1], 't', t, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return ok
`

// redisServer is a redis-server on a loopback port, in its own directory.
type redisServer struct {
	cmd    *exec.Cmd
	addr   string
	client *redis.Client
	sha    string
}

func startRedis(ctx context.Context, dir string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (make bench-peers installs it from Debian): %w", err)
	}
	ports, err := loopback.Ports(1)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	cmd := exec.Command(bin, "--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no")
	logf, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &redisServer{cmd: cmd, addr: addr}
	s.client = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 256})
	deadline := time.Now().Add(10 * time.Second)
	for s.client.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s.sha, err = s.client.ScriptLoad(ctx, tokenBucket).Result(); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *redisServer) stop() {
	if s.client != nil {
		s.client.Close()
	}
	terminate(s.cmd, 5*time.Second)
}

// terminate stops a process by its PID: SIGTERM, then SIGKILL after grace.
func terminate(cmd *exec.Cmd, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// check decides a request under the first n rules: one EVALSHA per rule,
// pipelined, admitted when every rule admits.
func (s *redisServer) check(ctx context.Context, q *request, n int) (bool, error) {
	now := strconv.FormatFloat(float64(time.Now().UnixMicro())/1e6, 'f', 6, 64)
	pipe := s.client.Pipeline()
	cmds := make([]*redis.Cmd, n)
	for i, r := range ruleSpecs[:n] {
		cmds[i] = pipe.EvalSha(ctx, s.sha, []string{r.key(q)}, r.rate, r.burst, now, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, err
	}
	ok := true
	for _, c := range cmds {
		v, err := c.Int()
		if err != nil {
			return false, err
		}
		ok = ok && v == 1
	}
	return ok, nil
}

// cpuSeconds is a process's user and system CPU time so far.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses.
	s := string(b)
	i := len(s) - 1
	for i > 0 && s[i] != ')' {
		i--
	}
	var f []string
	start := -1
	for j := i + 2; j <= len(s); j++ {
		if j == len(s) || s[j] == ' ' {
			if start >= 0 {
				f = append(f, s[start:j])
				start = -1
			}
		} else if start < 0 {
			start = j
		}
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}
