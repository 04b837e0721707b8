//go:build unix && !linux

package main

import "syscall"

// sysProcAttr puts each allot process in a group of its own, so that a
// signal reaches everything it started.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
