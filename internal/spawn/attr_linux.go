//go:build linux

package spawn

import "syscall"

// SysProcAttr puts a child in a process group of its own and has the
// kernel SIGKILL it if the parent dies first, however it dies.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
