package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
)

// listenSocket listens on a Unix-domain socket at path for the sidecar's
// HTTP endpoints: a gateway on the same host skips TCP, and the socket's
// file mode (0660) says who may call. A socket left by a sidecar that did
// not exit cleanly is replaced; any other file there is an error.
func listenSocket(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("--http-socket %s: a file that is not a socket is there", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("--http-socket %s: removing the old socket: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--http-socket %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on --http-socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		lis.Close()
		return nil, fmt.Errorf("--http-socket %s: %w", path, err)
	}
	return lis, nil
}
