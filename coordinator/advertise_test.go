package coordinator

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/loopback"
	"github.com/allot-io/allot/internal/testwait"
)

// freePorts are n distinct loopback ports, free when picked, below the
// kernel's ephemeral range: a member stopped and started again on its
// port must not find it taken by an outgoing connection meanwhile
// (TestRecoverLostQuorum did: "bind: address already in use").
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := loopback.Ports(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// freePort is one loopback port, as freePorts picks them.
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
