package loopback

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsBelowTheEphemeralRange: the ports are distinct, free, and
// below the range outgoing connections draw from.
func TestPortsBelowTheEphemeralRange(t *testing.T) {
	ports, err := Ports(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < low || p >= ephemeralLow() || seen[p] {
			t.Fatalf("port %d: want distinct ports in %d–%d (got %v)", p, low, ephemeralLow()-1, ports)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free once picked: %v", p, err)
		}
		l.Close()
	}
}
