//go:build linux

package main

import "syscall"

// demoSysProcAttr puts a coordinator in its own process group, so that a
// Ctrl-C at the terminal reaches only the demo, which then kills it, and
// has the kernel SIGKILL it if the demo dies first, however it dies.
func demoSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
