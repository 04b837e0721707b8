package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"time"
)

// echoFloor measures the loopback floor: sequential round trips of 120
// bytes each way to a server in another goroutine that does no work, over
// TCP as the sidecar's clients use it.
func echoFloor(n int) (*latencies, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	msg, buf := make([]byte, 120), make([]byte, 120)
	r := bufio.NewReader(c)
	lat := &latencies{}
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		lat.d = append(lat.d, time.Since(t0))
		lat.admitted++
	}
	return lat, nil
}

var benchmarkRate = regexp.MustCompile(`([0-9.]+) requests per second`)

// redisBenchmark runs Debian's redis-benchmark, pipelined 16 deep from 32
// clients, and returns the rate it reports.
func redisBenchmark(ctx context.Context, addr string, n int, args ...string) (float64, error) {
	host, port, _ := net.SplitHostPort(addr)
	full := append([]string{"-h", host, "-p", port, "-P", "16", "-c", "32", "-n", strconv.Itoa(n), "-q"}, args...)
	out, err := exec.CommandContext(ctx, "redis-benchmark", full...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %w: %s", err, out)
	}
	m := benchmarkRate.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		return 0, fmt.Errorf("redis-benchmark printed no rate: %q", out)
	}
	return strconv.ParseFloat(string(m[len(m)-1][1]), 64)
}
