package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/testwait"
)

// TestDrainClosesUnusedConns: a connection that has sent no request does
// not hold a sidecar's shutdown, while a request in flight still gets its
// answer. Without drain, http.Server.Shutdown waits for such a connection
// for five seconds.
func TestDrainClosesUnusedConns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drain bool
		want  error // from Shutdown within a second
	}{
		{"drained", true, nil},
		{"not drained (net/http alone)", false, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var unused unusedConns
			started, release := make(chan struct{}), make(chan struct{})
			srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, ConnState: unused.track,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					close(started)
					<-release
					io.WriteString(w, "done")
				})}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(lis)
			defer srv.Close()

			// One connection that never sends, one request in flight.
			idle, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer idle.Close()
			answer := make(chan error, 1)
			go func() {
				resp, err := http.Get("http://" + lis.Addr().String() + "/")
				if err == nil {
					var b []byte
					b, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && string(b) != "done" {
						err = errors.New("answered " + string(b))
					}
				}
				answer <- err
			}()
			<-started
			testwait.For(t, 5*time.Second, "the server to see the unused connection", func() bool {
				unused.mu.Lock()
				defer unused.mu.Unlock()
				return len(unused.fresh) == 1
			})

			if tc.drain {
				unused.drain()
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			shut := make(chan error, 1)
			go func() { shut <- srv.Shutdown(ctx) }()
			close(release)
			if err := <-answer; err != nil {
				t.Errorf("the request in flight during the drain: %v", err)
			}
			if err := <-shut; !errors.Is(err, tc.want) {
				t.Errorf("Shutdown = %v, want %v", err, tc.want)
			}
			if tc.drain {
				idle.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := idle.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
					t.Errorf("the unused connection after the drain: read %v, want it closed", err)
				}
			}
		})
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}
