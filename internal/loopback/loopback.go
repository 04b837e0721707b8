package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// low is the bottom of the span Ports draws from: above the well-known
// and most registered services' ports.
const low = 10000

// Ports picks n free loopback ports below the kernel's ephemeral range,
// so that no outgoing connection takes one while its process is down
// between a stop and a restart. Every listener is held until all are
// picked, so none is picked twice.
func Ports(n int) ([]int, error) {
	high := ephemeralLow() - 1
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("loopback: no %d free ports in %d–%d", n, low, high)
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

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range), or 32001 where it cannot be read or leaves too
// little below it.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32001
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32001
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= low+1000 {
		return 32001
	}
	return lo
}
