// Package listenerr explains why a server could not listen on the
// address a flag gave it. "bind: address already in use" names neither
// the flag nor the likely cause, and the quick start's second run, with
// the first still running in the background, met exactly that.
package listenerr

import (
	"errors"
	"fmt"
	"syscall"
)

// ErrInUse is wrapped by Explain's error for an address another process
// listens on.
var ErrInUse = errors.New("the address is in use")

// Explain wraps err, from listening on addr (given by --flag), with what
// to do about it: for an address in use, that another process (an allot
// left running, often) holds it, and how to move; otherwise what failed
// and where.
func Explain(flag, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("--%s %s: %w: another process listens there (an allot left running? `ss -ltnp` names it); stop it, or give --%s another port: %w", flag, addr, ErrInUse, flag, err)
	}
	return fmt.Errorf("--%s %s: %w", flag, addr, err)
}
