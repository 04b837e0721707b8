package spawn

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Env is this process's environment without ALLOT_ variables, which would
// change what a child allot process does (an admin token, a config file):
// the parent sets every flag it means.
func Env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ALLOT_") {
			out = append(out, kv)
		}
	}
	return out
}

// LoopbackPorts picks n free loopback ports below the kernel's ephemeral
// range, so that no outgoing connection takes one while its process is
// down between a kill and a restart. Every listener is held until all are
// picked, so none is picked twice.
func LoopbackPorts(n int) ([]int, error) {
	high := 32000
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo > 11000 {
				high = lo - 1
			}
		}
	}
	const low = 10000
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("no %d free loopback ports in %d–%d", n, low, high)
		}
		port := low + rand.IntN(high-low)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		held = append(held, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// Closed reports whether a channel that is only ever closed is closed.
func Closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
