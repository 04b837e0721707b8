package coordinator

import (
	"errors"
	"github.com/allot-io/allot/internal/testwait"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// freePort returns a loopback port that was free a moment ago.
// freePorts are n distinct loopback ports, free when picked: every
// listener stays open until all are picked, so that none is handed out
// twice (freePort called n times may return a port again).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

func freePort(t *testing.T) int {
	t.Helper()
	return freePorts(t, 1)[0]
}

// TestAdvertiseHost: a member listening on every interface must say which
// address others dial; given one, that is what it records and hands out.
func TestAdvertiseHost(t *testing.T) {
	cfg := testConfig(t, "n1", t.TempDir())
	cfg.Bootstrap = true
	cfg.GRPCAddr = "0.0.0.0:0"
	if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "GRPCAddr") {
		t.Fatalf("New without AdvertiseHost = %v; want an error naming GRPCAddr", err)
	}
	cfg.RaftAddr = "0.0.0.0:" + strconv.Itoa(freePort(t))
	cfg.AdvertiseHost = "127.0.0.1"
	cfg.Insecure = true // no credentials in this test
	c := start(t, cfg)
	waitLeader(t, []*Coordinator{c})
	testwait.For(t, 10*time.Second, "the member to record itself", func() bool { return len(c.members()) == 1 })
	m := c.members()[0]
	if !strings.HasPrefix(m.GetGrpcAddress(), "127.0.0.1:") || !strings.HasPrefix(m.GetRaftAddress(), "127.0.0.1:") {
		t.Fatalf("member recorded as grpc %q, raft %q; want the advertised host", m.GetGrpcAddress(), m.GetRaftAddress())
	}
}
