package clusterclient

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/allot-io/allot/internal/auth"
)

// serve runs a real gRPC server with the health service on l, TLS with
// the member certificate when tlsFiles is set.
func serve(t *testing.T, l net.Listener, tlsFiles *auth.TLSFiles) string {
	t.Helper()
	var opts []grpc.ServerOption
	if tlsFiles != nil {
		r, err := auth.NewReloader(*tlsFiles, nil)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(r.ServerConfig(false))))
	}
	s := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

// nonLoopback is an address of this host's that is not loopback, or "".
func nonLoopback() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// TestExplain calls real gRPC servers the wrong way and checks the cause
// Explain finds; and that a call that fails for other reasons (nothing
// listens) is left alone.
func TestExplain(t *testing.T) {
	dir := t.TempDir()
	ca, err := auth.NewCA(dir, "ca", "allot.test")
	if err != nil {
		t.Fatal(err)
	}
	member, err := ca.IssueMember("c1") // for 127.0.0.1 and localhost
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "ops.token")
	if err := os.WriteFile(tokenFile, []byte(auth.NewToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := func(host string) net.Listener {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	files := &auth.TLSFiles{CertFile: member.CertFile, KeyFile: member.KeyFile}
	tlsAddr := serve(t, listen("127.0.0.1"), files)
	plainAddr := serve(t, listen("127.0.0.1"), nil)
	closed := listen("127.0.0.1")
	closedAddr := closed.Addr().String()
	closed.Close()

	type tc struct {
		name  string
		addr  string
		creds Credentials
		how   Dialled
		want  error // nil: Explain says nothing
	}
	tests := []tc{
		{"plaintext to TLS", tlsAddr, Credentials{}, Dialled{}, ErrServerTLS},
		{"TLS to plaintext", plainAddr, Credentials{CAFile: ca.File}, Dialled{TLS: true}, ErrServerPlaintext},
		{"unknown CA", tlsAddr, Credentials{CAFile: filepath.Join(dir, "other.pem")}, Dialled{TLS: true}, ErrUnknownAuthority},
		{"nothing listens", closedAddr, Credentials{}, Dialled{}, nil},
		{"right", tlsAddr, Credentials{CAFile: ca.File}, Dialled{TLS: true}, nil},
	}
	other, err := auth.NewCA(dir, "other", "other.test")
	if err != nil {
		t.Fatal(err)
	}
	tests[2].creds.CAFile = other.File
	if host := nonLoopback(); host != "" {
		// A certificate for loopback, dialled at another address; and a
		// token the client will not send in the clear off loopback.
		tests = append(tests,
			tc{"wrong name", serve(t, listen(host), files), Credentials{CAFile: ca.File}, Dialled{TLS: true}, ErrWrongName},
			tc{"token in the clear", serve(t, listen(host), nil), Credentials{TokenFile: tokenFile}, Dialled{Credential: true}, ErrTokenNeedsTLS})
	} else {
		t.Log("no address but loopback: the wrong-name and token-in-the-clear cases are not run")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := DialOptions(nil, tt.creds, nil)
			if err != nil {
				t.Fatal(err)
			}
			cc, err := grpc.NewClient(tt.addr, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, callErr := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			got := Explain(ctx, tt.addr, callErr, tt.how)
			switch {
			case tt.want == nil && got != nil:
				t.Errorf("call error %v explained as %v; want nothing", callErr, got)
			case tt.want != nil && !errors.Is(got, tt.want):
				t.Errorf("call error %v explained as %v; want %v", callErr, got, tt.want)
			case tt.want != nil:
				var ce *CallError
				if !errors.As(got, &ce) || ce.Addr != tt.addr || !errors.Is(got, callErr) {
					t.Errorf("%v: want a *CallError for %s wrapping the call's error", got, tt.addr)
				}
			}
		})
	}
}
