package auth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"google.golang.org/grpc/credentials"
)

// parseTokenFile reads a client's token file: the token, surrounding
// whitespace ignored.
func parseTokenFile(name string) func(d [][]byte) (string, error) {
	return func(d [][]byte) (string, error) {
		tok := strings.TrimSpace(string(d[0]))
		if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
			return "", fmt.Errorf("token file %s: want one token on one line", name)
		}
		return tok, nil
	}
}

// ErrTokenNeedsTLS is the error of a call that would have sent a bearer
// token in the clear to an address that is not loopback. gRPC reports it
// as Unauthenticated, with this text in the message.
var ErrTokenNeedsTLS = errors.New("auth: refusing to send a bearer token without TLS to a non-loopback address")

// TokenCredentials sends a bearer token, read from a file and re-read
// when it changes, with every call. It refuses to send it in the clear to
// anything but a loopback address: a token on the network needs TLS.
type TokenCredentials struct {
	token func() string
}

// NewTokenCredentials reads the token file.
func NewTokenCredentials(path string, onError func(error)) (*TokenCredentials, error) {
	w, err := watch([]string{path}, parseTokenFile(path), onError)
	if err != nil {
		return nil, fmt.Errorf("auth: reading token file: %w", err)
	}
	return &TokenCredentials{token: w.get}, nil
}

// StaticTokenCredentials sends a token given as a value, under the same
// rule: over TLS, or to loopback.
func StaticTokenCredentials(token string) *TokenCredentials {
	return &TokenCredentials{token: func() string { return token }}
}

// Token is the current token.
func (t *TokenCredentials) Token() string { return t.token() }

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t *TokenCredentials) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	ri, _ := credentials.RequestInfoFromContext(ctx)
	if credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity) != nil && !loopbackURI(uri) {
		return nil, ErrTokenNeedsTLS
	}
	return map[string]string{"authorization": "Bearer " + t.Token()}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials; the
// check is GetRequestMetadata's, which lets loopback through.
func (t *TokenCredentials) RequireTransportSecurity() bool { return false }

// loopbackURI reports whether the call goes to a loopback host.
func loopbackURI(uri []string) bool {
	if len(uri) == 0 {
		return false
	}
	u, err := url.Parse(uri[0])
	if err != nil {
		return false
	}
	return IsLoopback(u.Hostname())
}

// IsLoopback reports whether host (a name or an IP, no port) is the
// loopback interface.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
