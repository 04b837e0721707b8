package resp

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/allot-io/allot/agent/agenttest"
	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// BenchmarkRoundTrip is one client sending ALLOT.CHECK and waiting for
// each reply over loopback TCP, as a client that does not pipeline does:
// what the server spends per command beyond the check, in system calls
// and wake-ups. Profile it to see them:
//
//	go test -run '^$' -bench RoundTrip -cpuprofile cpu.out ./agent/resp
func BenchmarkRoundTrip(b *testing.B) {
	_, _, addr := serve(b, Config{}, agenttest.Rule("big", rules.Tenant, algo.TokenBucket, 900_000_000, time.Second, lease.Capacity))
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	cmd := []byte("*5\r\n$11\r\nALLOT.CHECK\r\n$6\r\ntenant\r\n$4\r\nacme\r\n$4\r\nuser\r\n$2\r\nu1\r\n")
	rd := bufio.NewReader(nc)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := nc.Write(cmd); err != nil {
			b.Fatal(err)
		}
		// The reply is an array of six: its header and six lines.
		for range 7 {
			if _, err := rd.ReadSlice('\n'); err != nil {
				b.Fatal(err)
			}
		}
	}
}
