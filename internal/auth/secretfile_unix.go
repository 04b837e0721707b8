//go:build unix

package auth

import (
	"io/fs"
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"
)

// fileGroup is the name of info's group (its ID when it has no name), and
// whether this process is in it.
func fileGroup(info fs.FileInfo) (name string, ours bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return "", true
	}
	gid := int(st.Gid)
	name = strconv.Itoa(gid)
	if g, err := user.LookupGroupId(name); err == nil {
		name = g.Name
	}
	groups, _ := os.Getgroups() // on error, the primary group alone
	return name, gid == os.Getgid() || slices.Contains(groups, gid)
}
