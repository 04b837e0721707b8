package clusterclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-io/allot/internal/auth"
)

// The causes Explain finds, each the caller's own configuration: what to
// change is the caller's to say (a flag, a Config field).
var (
	// ErrServerTLS: the server speaks TLS, and the call was plaintext.
	ErrServerTLS = errors.New("speaks TLS")
	// ErrServerPlaintext: the server speaks plaintext, and the call was
	// TLS.
	ErrServerPlaintext = errors.New("speaks plaintext, not TLS")
	// ErrUnknownAuthority: the server's certificate is signed by no CA
	// the caller trusts.
	ErrUnknownAuthority = errors.New("presents a certificate signed by a CA this client does not trust")
	// ErrWrongName: the server's certificate does not name the address
	// dialled.
	ErrWrongName = errors.New("presents a certificate that does not name the address dialled")
	// ErrCredentialRequired: the server wants a credential and the call
	// carried none.
	ErrCredentialRequired = errors.New("requires a credential")
	// ErrTokenRefused: the server refused the bearer token the call
	// carried (or the certificate it presented).
	ErrTokenRefused = errors.New("refused the credential")
	// ErrTokenNeedsTLS: the client would not send its token in the clear
	// to an address that is not loopback.
	ErrTokenNeedsTLS = errors.New("was not sent the token: a bearer token travels only over TLS, or to loopback")
)

// Dialled says how a call was made, for Explain.
type Dialled struct {
	TLS        bool // with TLS
	Credential bool // with a bearer token or a client certificate
}

// CallError is a failed call explained: the address, the cause (one of
// the Err variables) and the call's own error.
type CallError struct {
	Addr  string
	Cause error
	Err   error
	// Detail is the part of Err worth repeating (the x509 message), or "".
	Detail string
}

func (e *CallError) Error() string {
	s := e.Addr + " " + e.Cause.Error()
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// Unwrap makes errors.Is true for the cause and the call's error.
func (e *CallError) Unwrap() []error { return []error{e.Cause, e.Err} }

// Explain says why a call to addr, made as how says, failed, when the
// cause is the caller's transport or credentials: a *CallError. It returns
// nil for anything else (the member is down, the call was refused for its
// role, a bad request). When gRPC's message is ambiguous (the connection
// closed during the handshake), it finds out whether addr speaks TLS by
// starting a handshake of its own, within ctx and at most two seconds; it
// sends nothing else.
func Explain(ctx context.Context, addr string, err error, how Dialled) error {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	msg := st.Message()
	explained := func(cause error, detail string) error {
		return &CallError{Addr: addr, Cause: cause, Err: err, Detail: detail}
	}
	switch st.Code() {
	case codes.Unauthenticated, codes.Unavailable:
		// gRPC fails a call whose per-RPC credentials erred as
		// Unauthenticated (older versions: Unavailable).
		if strings.Contains(msg, auth.ErrTokenNeedsTLS.Error()) {
			return explained(ErrTokenNeedsTLS, "")
		}
	}
	switch st.Code() {
	case codes.Unauthenticated:
		if how.Credential {
			return explained(ErrTokenRefused, "")
		}
		return explained(ErrCredentialRequired, "")
	case codes.Unavailable:
	default:
		return nil
	}
	switch {
	case strings.Contains(msg, "certificate signed by unknown authority"):
		return explained(ErrUnknownAuthority, "")
	case strings.Contains(msg, "certificate is valid for"), strings.Contains(msg, "doesn't contain any IP SANs"):
		return explained(ErrWrongName, x509Detail(msg))
	case !handshakeLike(msg):
		return nil
	}
	switch speaks, known := speaksTLS(ctx, addr); {
	case !known:
		return nil
	case speaks && !how.TLS:
		return explained(ErrServerTLS, "")
	case !speaks && how.TLS:
		return explained(ErrServerPlaintext, "")
	}
	return nil
}

// handshakeLike reports whether a gRPC Unavailable message is what a
// transport mismatch looks like: the connection was accepted, then closed
// or answered with something that is not the protocol expected.
func handshakeLike(msg string) bool {
	for _, s := range []string{
		"error reading server preface",                    // plaintext client, TLS server
		"http2: frame too large",                          // the same, a TLS alert read as a frame
		"first record does not look like a TLS handshake", // TLS client, plaintext server
		"authentication handshake failed",
		"connection reset by peer",
		"EOF",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// x509Detail is the x509 part of a gRPC message, "x509: certificate is
// valid for a, not b".
func x509Detail(msg string) string {
	i := strings.Index(msg, "x509: ")
	if i < 0 {
		return ""
	}
	return strings.TrimRight(msg[i:], `"`)
}

// speaksTLS starts a TLS handshake with addr to see whether it answers in
// TLS, and sends nothing but a ClientHello. Whether its certificate
// verifies does not matter: one the system does not trust still means
// TLS. known is false when the question could not be answered (nothing
// listens, or it hung up).
func speaksTLS(ctx context.Context, addr string) (speaks, known bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, false
	}
	defer conn.Close()
	host, _, _ := net.SplitHostPort(addr)
	tc := tls.Client(conn, &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12})
	err = tc.HandshakeContext(ctx)
	var rec tls.RecordHeaderError
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	switch {
	case err == nil, errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname):
		return true, true
	case errors.As(err, &rec):
		return false, true
	}
	return false, false
}
