package resp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/agenttest"
	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"github.com/redis/go-redis/v9"
)

// serve starts a Server for an agent enforcing rs on a loopback port.
func serve(t testing.TB, cfg Config, rs ...rules.Rule) (*agent.Agent, *Server, string) {
	t.Helper()
	a, err := agent.New(agent.Config{Rules: rs, Clock: agenttest.NewClock()})
	if err != nil {
		t.Fatal(err)
	}
	s := New(a, cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
		a.Close(ctx)
	})
	return a, s, l.Addr().String()
}

func quota(limit int64) rules.Rule {
	return agenttest.Rule("quota", rules.Tenant, algo.FixedWindow, limit, time.Hour, lease.Quota)
}

// TestGoRedisCheck: go-redis, in RESP2 and RESP3, pipelined and not,
// gets ALLOT.CHECK's decisions: three of a limit of 3, then refusals with
// a retry-after; a peek spends nothing.
func TestGoRedisCheck(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			_, _, addr := serve(t, Config{}, quota(3))
			rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto})
			defer rdb.Close()
			ctx := context.Background()
			if err := rdb.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				v, err := rdb.Do(ctx, "ALLOT.CHECK", "tenant", "acme", "user", "u1").Result()
				if err != nil {
					t.Fatal(err)
				}
				allowed, rule, limit, remaining, retry := decoded(t, v)
				if allowed != (i < 3) || rule != "quota" || limit != 3 || remaining != max(2-int64(i), 0) {
					t.Fatalf("check %d: %v", i, v)
				}
				if !allowed && retry <= 0 {
					t.Fatalf("refused with retry-after %d ms", retry)
				}
			}
			// A peek of a fresh tenant: admitted, nothing spent.
			for range 10 {
				v, _ := rdb.Do(ctx, "ALLOT.CHECK", "tenant", "peeker", "cost", "0").Result()
				if allowed, _, _, remaining, _ := decoded(t, v); !allowed || remaining != 3 {
					t.Fatalf("peek: %v", v)
				}
			}
			// Pipelined: one write of 100 commands, 100 replies in order.
			pipe := rdb.Pipeline()
			cmds := make([]*redis.Cmd, 100)
			for i := range cmds {
				cmds[i] = pipe.Do(ctx, "ALLOT.CHECK", "tenant", fmt.Sprintf("p%d", i%10))
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			admitted := 0
			for _, c := range cmds {
				if a, _, _, _, _ := decoded(t, c.Val()); a {
					admitted++
				}
			}
			if admitted != 30 {
				t.Fatalf("pipelined: %d admitted, want 3 for each of 10 tenants", admitted)
			}
		})
	}
}

// decoded reads ALLOT.CHECK's reply, RESP2's array or RESP3's map.
func decoded(t *testing.T, v any) (allowed bool, rule string, limit, remaining, retry int64) {
	t.Helper()
	switch r := v.(type) {
	case []any:
		if len(r) != 6 {
			t.Fatalf("reply %v", r)
		}
		return r[0].(int64) == 1, r[1].(string), r[2].(int64), r[3].(int64), r[4].(int64)
	case map[any]any:
		return r["allowed"].(bool), r["rule"].(string), r["limit"].(int64), r["remaining"].(int64), r["retry_after_ms"].(int64)
	}
	t.Fatalf("reply of type %T: %v", v, v)
	return
}

// TestErrorsAreReplies: bad commands get a RESP error naming the problem
// and the connection goes on.
func TestErrorsAreReplies(t *testing.T) {
	_, _, addr := serve(t, Config{}, quota(3))
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"NOSUCH", "x"}, "ERR unknown command 'NOSUCH'"},
		{[]any{"ALLOT.CHECK"}, "ERR wrong number of arguments for 'allot.check'"},
		{[]any{"ALLOT.CHECK", "tenant"}, "ERR wrong number of arguments"},
		{[]any{"ALLOT.CHECK", "user", "u"}, "ERR ALLOT.CHECK needs tenant"},
		{[]any{"ALLOT.CHECK", "tenant", "a", "cost", "ten"}, "ERR cost 'ten'"},
		{[]any{"ALLOT.CHECK", "tenant", "a", "cost", "-1"}, "ERR cost '-1'"},
		{[]any{"ALLOT.CHECK", "tenant", "a", "cost", "99999999999"}, "ERR cost"},
		{[]any{"ALLOT.CHECK", "tenant", "a", "priority", "urgent"}, "ERR priority 'urgent'"},
		{[]any{"ALLOT.CHECK", "tenant", "a", "colour", "red"}, "ERR unknown ALLOT.CHECK option 'colour'"},
		{[]any{"ALLOT.CHECK", "tenant", strings.Repeat("t", agent.MaxNameLen+1)}, "ERR tenant"},
		{[]any{"SELECT", "3"}, "ERR DB index is out of range"},
		{[]any{"HELLO", "4"}, "NOPROTO"},
	} {
		err := rdb.Do(ctx, tc.args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if v, err := rdb.Do(ctx, "ALLOT.CHECK", "tenant", "a").Result(); err != nil || v.([]any)[0].(int64) != 1 {
		t.Fatalf("after the errors: %v %v", v, err)
	}
}

// TestHostileInput: malformed protocol is answered with an error and the
// connection closed; the server serves others meanwhile.
func TestHostileInput(t *testing.T) {
	_, s, addr := serve(t, Config{MaxConns: 4}, quota(3))
	for _, tc := range []struct{ name, in, want string }{
		{"bad length", "*abc\r\n", "-ERR Protocol error: invalid multibulk length"},
		{"too many args", "*100000\r\n", "-ERR Protocol error: 100000 arguments"},
		{"huge bulk", "*2\r\n$11\r\nALLOT.CHECK\r\n$99999999\r\n", "-ERR Protocol error: an argument of 99999999 bytes"},
		{"no dollar", "*1\r\n:5\r\n", "-ERR Protocol error: expected '$'"},
		{"long inline", strings.Repeat("x", 20000) + "\r\n", "-ERR Protocol error: a line over"},
		{"bad crlf", "*1\r\n$4\r\nPINGxx", "-ERR Protocol error: a bulk string not ended by CRLF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, tc.in)
			line, _ := bufio.NewReader(c).ReadString('\n')
			if !strings.HasPrefix(line, tc.want) {
				t.Fatalf("answered %q, want %q", line, tc.want)
			}
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Fatal("the connection stayed open after a protocol error")
			}
		})
	}
	// A half-sent command holds one connection, not the server.
	stuck, _ := net.Dial("tcp", addr)
	defer stuck.Close()
	io.WriteString(stuck, "*2\r\n$4\r\nPING")
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	// Past MaxConns a connection is refused with an error.
	var extra []net.Conn
	for range 6 {
		c, _ := net.Dial("tcp", addr)
		extra = append(extra, c)
	}
	refused := 0
	for _, c := range extra {
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if line, _ := bufio.NewReader(c).ReadString('\n'); strings.Contains(line, "max number of clients") {
			refused++
		}
		c.Close()
	}
	if refused == 0 || s.Stats().Errors == 0 {
		t.Fatalf("%d of 6 connections over MaxConns 4 refused", refused)
	}
}

// TestCheckAllocatesNothing: a command for names seen before allocates
// nothing: parsing, the check, the reply.
func TestCheckAllocatesNothing(t *testing.T) {
	a, s, _ := serve(t, Config{}, agenttest.Rule("big", rules.Tenant, algo.FixedWindow, 1<<40, time.Hour, lease.Capacity))
	_ = a
	in := "*5\r\n$11\r\nALLOT.CHECK\r\n$6\r\ntenant\r\n$4\r\nacme\r\n$4\r\nuser\r\n$2\r\nu1\r\n"
	src := strings.NewReader("")
	c := &conn{s: s, rd: newReader(src, defaultBufSize), intern: map[string]string{}}
	c.w.w = bufio.NewWriterSize(io.Discard, defaultBufSize)
	run := func() {
		src.Reset(in)
		c.rd.r.Reset(src)
		args, err := c.rd.next()
		if err != nil {
			t.Fatal(err)
		}
		c.dispatch(args)
		c.w.w.Flush()
	}
	run()
	if n := testing.AllocsPerRun(1000, run); n != 0 {
		t.Fatalf("ALLOT.CHECK allocates %v per command", n)
	}
}

// TestRealClients: redis-cli, redis-benchmark (Debian's redis-tools) and
// Python's redis (python3-redis), which no one here wrote, talk to the
// server. Make's test target installs them; with ALLOT_PEER_TESTS unset a
// missing one skips.
func TestRealClients(t *testing.T) {
	need := func(path string) {
		if _, err := os.Stat(path); err != nil {
			if os.Getenv("ALLOT_PEER_TESTS") != "" {
				t.Fatalf("%s is missing (make gateways-deps installs it)", path)
			}
			t.Skipf("%s is missing", path)
		}
	}
	need("/usr/bin/redis-cli")
	need("/usr/bin/redis-benchmark")
	a, _, addr := serve(t, Config{}, quota(3), agenttest.Rule("bench", rules.Route, algo.FixedWindow, 1<<40, time.Hour, lease.Capacity))
	host, port, _ := net.SplitHostPort(addr)
	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	t.Run("redis-cli", func(t *testing.T) {
		if out := run("/usr/bin/redis-cli", "-h", host, "-p", port, "PING"); out != "PONG\n" {
			t.Fatalf("PING: %q", out)
		}
		out := run("/usr/bin/redis-cli", "-h", host, "-p", port, "ALLOT.CHECK", "tenant", "cli", "user", "u1")
		if out != "1\nquota\n3\n2\n0\n" && !strings.HasPrefix(out, "1\nquota\n3\n2\n0\n") {
			t.Fatalf("ALLOT.CHECK: %q", out)
		}
		out = run("/usr/bin/redis-cli", "-h", host, "-p", port, "-3", "ALLOT.CHECK", "tenant", "cli3")
		if !strings.Contains(out, "allowed") || !strings.Contains(out, "quota") {
			t.Fatalf("ALLOT.CHECK over RESP3: %q", out)
		}
		out = run("/usr/bin/redis-cli", "-h", host, "-p", port, "ALLOT.CHECK", "tenant")
		if !strings.Contains(out, "ERR wrong number of arguments") {
			t.Fatalf("a bad command: %q", out)
		}
	})
	t.Run("redis-benchmark", func(t *testing.T) {
		before := a.Status().Rules
		_ = before
		out := run("/usr/bin/redis-benchmark", "-h", host, "-p", port, "-n", "20000", "-c", "8", "-P", "16", "-q",
			"ALLOT.CHECK", "tenant", "bench", "route", "/r")
		if !strings.Contains(out, "requests per second") {
			t.Fatalf("redis-benchmark: %q", out)
		}
		t.Logf("redis-benchmark -P 16: %s", strings.TrimSpace(out[strings.LastIndex(out, "\r")+1:]))
		d := a.Check(agent.Request{Tenant: "bench", Route: "/r", Peek: true})
		if d.Rule == "" {
			t.Fatalf("no rule decided the benchmark's key: %+v", d)
		}
	})
	t.Run("python3-redis", func(t *testing.T) {
		need("/usr/bin/python3")
		if err := exec.Command("/usr/bin/python3", "-c", "import redis").Run(); err != nil {
			if os.Getenv("ALLOT_PEER_TESTS") != "" {
				t.Fatal("python3-redis is missing (make gateways-deps installs it)")
			}
			t.Skip("python3-redis is missing")
		}
		script := fmt.Sprintf(`
import redis
r = redis.Redis(host=%q, port=%s)
print(r.ping())
for i in range(4):
    print(r.execute_command("ALLOT.CHECK", "tenant", "py", "cost", "1"))
try:
    r.execute_command("ALLOT.CHECK", "tenant", "py", "cost", "x")
except redis.exceptions.ResponseError as e:
    print("error:", e)
`, host, port)
		out := run("/usr/bin/python3", "-c", script)
		want := "True\n[1, b'quota', 3, 2, 0, "
		if !strings.HasPrefix(out, want) || !strings.Contains(out, "[0, b'quota', 3, 0, ") || !strings.Contains(out, "error: cost 'x'") {
			t.Fatalf("python: %q", out)
		}
	})
}
