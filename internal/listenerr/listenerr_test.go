package listenerr

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// TestExplainAddressInUse: a second listener on a port names the flag,
// says another process holds it and how to move, and keeps the cause.
func TestExplainAddressInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = net.Listen("tcp", l.Addr().String())
	if err == nil {
		t.Fatal("a second listener on the same port")
	}
	got := Explain("grpc-addr", l.Addr().String(), err)
	if !errors.Is(got, ErrInUse) || !strings.Contains(got.Error(), "another process listens there") ||
		!strings.Contains(got.Error(), "give --grpc-addr another port") || !strings.Contains(got.Error(), "address already in use") {
		t.Fatalf("Explain: %v", got)
	}
	other := Explain("http-addr", "10.255.255.1:80", errors.New("bind: cannot assign requested address"))
	if errors.Is(other, ErrInUse) || other.Error() != "--http-addr 10.255.255.1:80: bind: cannot assign requested address" {
		t.Fatalf("Explain of another error: %v", other)
	}
}
