package resp

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/testwait"
)

// TestPipelineAfterIdleIsAnswered: a pipeline sent after the connection
// sat idle longer than the write timeout is answered in full, though its
// replies outgrow the write buffer and so are written before the batch
// ends. Until the write deadline was set for every write, those first
// writes ran against the deadline of the batch before, long past: the
// commands were decided and billed, and the client got no reply and a
// closed connection (a pooled go-redis client then retried, spending the
// quota again).
func TestPipelineAfterIdleIsAnswered(t *testing.T) {
	const timeout = 200 * time.Millisecond
	_, s, addr := serve(t, Config{WriteTimeout: timeout}, quota(1<<40))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING: %q, %v", line, err)
	}
	// The idleness is what is tested: the connection sits unused past
	// the write timeout of its last write.
	idle := time.Now().Add(2 * timeout)
	testwait.For(t, 5*time.Second, "the connection to sit idle past its write timeout", func() bool {
		return time.Now().After(idle)
	})

	const n = 700 // about 40 KiB of replies: more than the 16 KiB buffer
	var batch strings.Builder
	for i := range n {
		tenant := fmt.Sprintf("t%d", i%10)
		fmt.Fprintf(&batch, "*3\r\n$11\r\nALLOT.CHECK\r\n$6\r\ntenant\r\n$%d\r\n%s\r\n", len(tenant), tenant)
	}
	if _, err := c.Write([]byte(batch.String())); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := readReply(br); err != nil {
			t.Fatalf("reply %d of %d: %v (the server answered %d commands)", i+1, n, err, s.Stats().Commands)
		}
	}
	if got := s.Stats().Commands; got != n+1 {
		t.Fatalf("the server answered %d commands, want %d", got, n+1)
	}
}

// readReply reads one RESP2 reply, failing on an error reply.
func readReply(br *bufio.Reader) error {
	line, err := br.ReadString('\n')
	if err != nil {
		return err
	}
	if len(line) < 3 {
		return fmt.Errorf("a short line %q", line)
	}
	switch line[0] {
	case '-':
		return fmt.Errorf("an error reply %q", line)
	case '*':
		k, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil {
			return fmt.Errorf("an array header %q", line)
		}
		for range k {
			if err := readReply(br); err != nil {
				return err
			}
		}
	case '$':
		k, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil {
			return fmt.Errorf("a bulk header %q", line)
		}
		if k >= 0 {
			if _, err := br.Discard(k + 2); err != nil {
				return err
			}
		}
	}
	return nil
}
