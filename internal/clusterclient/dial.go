package clusterclient

import (
	"crypto/tls"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allot-io/allot/internal/auth"
)

// Credentials name the files a client proves itself with: a CA to verify
// the cluster, a certificate and key (mutual TLS), a bearer token. Each
// is re-read when it changes. All empty: plaintext, for loopback.
type Credentials struct {
	CAFile, CertFile, KeyFile, TokenFile string
}

// DialOptions are the options to dial a cluster with: TLS from tlsConfig
// when set, else from the credential files; the bearer token; and a
// reconnect within a couple of seconds of a member coming back, not
// gRPC's default of up to two minutes, since a client cut off runs on its
// fail modes. onError hears of a changed file that could not be loaded.
func DialOptions(tlsConfig *tls.Config, creds Credentials, onError func(error)) ([]grpc.DialOption, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	switch {
	case tlsConfig != nil:
		opts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig))}
	case creds.CAFile != "" || creds.CertFile != "":
		r, err := auth.NewReloader(auth.TLSFiles{CAFile: creds.CAFile, CertFile: creds.CertFile, KeyFile: creds.KeyFile}, onError)
		if err != nil {
			return nil, err
		}
		opts = []grpc.DialOption{grpc.WithTransportCredentials(r.ClientCredentials())}
	}
	if creds.TokenFile != "" {
		tok, err := auth.NewTokenCredentials(creds.TokenFile, onError)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tok))
	}
	return append(opts,
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}, MinConnectTimeout: time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20))), nil
}
