//go:build unix

package main

import (
	"io/fs"
	"os"
	"syscall"
)

// keepOwner gives f the owner and group of the file info describes, when
// they are not already its own: a tokens file edited by root must stay
// readable by the coordinator's user.
func keepOwner(f *os.File, info fs.FileInfo) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if int(st.Uid) == os.Getuid() && int(st.Gid) == os.Getgid() {
		return nil
	}
	return f.Chown(int(st.Uid), int(st.Gid))
}
