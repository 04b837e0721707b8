package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
)

// listenSocket listens on a Unix-domain socket at path (given as flag)
// for the sidecar's HTTP or gRPC endpoints: a gateway on the same host
// skips TCP, and the socket's file mode (0660) says who may call. A socket left by a sidecar that did
// not exit cleanly is replaced; any other file there is an error.
func listenSocket(flag, path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s %s: a file that is not a socket is there", flag, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("%s %s: removing the old socket: %w", flag, path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s %s: %w", flag, path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		lis.Close()
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return lis, nil
}
