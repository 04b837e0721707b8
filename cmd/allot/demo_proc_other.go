//go:build !linux

package main

import "syscall"

// demoSysProcAttr leaves a coordinator in the demo's process group: a
// Ctrl-C at the terminal reaches it too. Without Linux's parent-death
// signal, a demo killed with SIGKILL leaves its coordinators running.
func demoSysProcAttr() *syscall.SysProcAttr { return nil }
