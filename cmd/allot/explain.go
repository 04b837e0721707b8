package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/allot-io/allot/internal/clusterclient"
)

// callCreds are the credentials a command's calls present, to say which
// flag fixes a refusal.
type callCreds struct {
	creds      credFlags
	tokenValue bool // --admin-token VALUE
}

func (c callCreds) dialled() clusterclient.Dialled {
	return clusterclient.Dialled{
		TLS:        c.creds.ca != "" || c.creds.cert != "",
		Credential: c.creds.tokenFile != "" || c.tokenValue || c.creds.cert != "",
	}
}

// explain is a failed call to addr as one line, its cause and the flag or
// environment variable that fixes it, or nil when the failure is not the
// caller's configuration.
func (c callCreds) explain(ctx context.Context, addr string, err error) error {
	ex := clusterclient.Explain(ctx, addr, err, c.dialled())
	var ce *clusterclient.CallError
	if !errors.As(ex, &ce) {
		return nil
	}
	if errors.Is(ce.Cause, clusterclient.ErrCredentialRequired) || errors.Is(ce.Cause, clusterclient.ErrTokenRefused) {
		return fmt.Errorf("not allowed: %w: %s", ce, c.fix(ce.Cause))
	}
	return fmt.Errorf("%w: %s", ce, c.fix(ce.Cause))
}

// fix says what to change for a cause clusterclient.Explain found.
func (c callCreds) fix(cause error) string {
	switch {
	case errors.Is(cause, clusterclient.ErrServerTLS), errors.Is(cause, clusterclient.ErrTokenNeedsTLS):
		return "pass --ca FILE (or ALLOT_CA) with the CA that signed its certificate"
	case errors.Is(cause, clusterclient.ErrServerPlaintext):
		return "it has no certificate: leave out --ca and --cert (and ALLOT_CA, ALLOT_CERT), or start it with --cert and --key"
	case errors.Is(cause, clusterclient.ErrUnknownAuthority) && c.creds.ca != "":
		return fmt.Sprintf("%s is not the CA that signed it: pass --ca FILE (or ALLOT_CA) with the one that did", c.creds.ca)
	case errors.Is(cause, clusterclient.ErrUnknownAuthority):
		return "pass --ca FILE (or ALLOT_CA) with the CA that signed it"
	case errors.Is(cause, clusterclient.ErrWrongName):
		return "dial it by a name or address its certificate lists, or reissue the certificate with this one"
	case errors.Is(cause, clusterclient.ErrCredentialRequired):
		return "pass --token-file FILE (or ALLOT_TOKEN_FILE) with a token its --auth-tokens file lists (allot token makes one), or --cert and --key"
	case errors.Is(cause, clusterclient.ErrTokenRefused) && c.creds.tokenFile != "":
		return fmt.Sprintf("its --auth-tokens file does not list the token in %s (removed, rotated, or another cluster's?): pass --token-file (or ALLOT_TOKEN_FILE) with a current one", c.creds.tokenFile)
	case errors.Is(cause, clusterclient.ErrTokenRefused) && c.tokenValue:
		return "it does not accept the --admin-token value (or ALLOT_ADMIN_TOKEN): pass --token-file FILE (or ALLOT_TOKEN_FILE) with a token its --auth-tokens file lists"
	case errors.Is(cause, clusterclient.ErrTokenRefused):
		return fmt.Sprintf("it does not accept the certificate in %s: pass --cert and --key with one its --ca signed, or --token-file FILE (or ALLOT_TOKEN_FILE)", c.creds.cert)
	}
	return "check --ca, --token-file, --cert and --key"
}
