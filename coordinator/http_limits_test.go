package coordinator

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestHTTPConnectionsEnd: the HTTP server closes a keep-alive connection
// left idle, and one whose request does not arrive whole within the read
// timeout, whoever holds it.
func TestHTTPConnectionsEnd(t *testing.T) {
	const idle, read = 300 * time.Millisecond, time.Second
	nodes := cluster(t, 1, func(c *Config) {
		c.hooks = &testHooks{httpLimits: func(l *httpLimits) { l.idle, l.read = idle, read }}
	})
	addr := nodes[0].HTTPAddr()
	// closedWithin reads from conn until the server closes it, failing
	// if that takes longer than d.
	closedWithin := func(t *testing.T, conn net.Conn, d time.Duration) {
		t.Helper()
		start := time.Now()
		_ = conn.SetReadDeadline(start.Add(d))
		_, err := io.Copy(io.Discard, conn)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the connection was still open after %v", d)
		}
	}

	t.Run("idle keep-alive", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: allot\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("health check: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		closedWithin(t, conn, idle+5*time.Second)
	})
	t.Run("request trickling in", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "PUT /v1/overrides HTTP/1.1\r\nHost: allot\r\nContent-Length: 1000000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		closedWithin(t, conn, read+5*time.Second)
	})
}
