//go:build unix && !linux

package spawn

import "syscall"

// SysProcAttr puts a child in a process group of its own. Without Linux's
// parent-death signal, a parent killed with SIGKILL leaves it running.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
