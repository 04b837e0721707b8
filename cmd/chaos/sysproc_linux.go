//go:build linux

package main

import "syscall"

// sysProcAttr puts each allot process in a group of its own, so that a
// signal reaches everything it started, and has the kernel kill it if
// the harness dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
