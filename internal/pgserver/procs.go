package pgserver

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// procStat is what /proc/PID/stat says of a process that matters here.
type procStat struct {
	state byte // R, S, D, T (stopped), Z (zombie), …
	ppid  int
}

// readStat parses /proc/PID/stat. The command name, in parentheses, may
// itself hold spaces and parentheses, so the fields after it are found
// from the last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("pgserver: /proc/%d/stat has no ')'", pid)
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 2 || len(fields[0]) != 1 {
		return procStat{}, fmt.Errorf("pgserver: /proc/%d/stat is short", pid)
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	if err != nil {
		return procStat{}, fmt.Errorf("pgserver: /proc/%d/stat: ppid: %w", pid, err)
	}
	return procStat{state: fields[0][0], ppid: ppid}, nil
}

// children lists the processes whose parent is pid: a postmaster's
// backends and auxiliary processes are all its direct children.
func children(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("pgserver: listing processes: %w", err)
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(child)
		if err != nil {
			continue // it exited between ReadDir and here
		}
		if st.ppid == pid {
			out = append(out, child)
		}
	}
	return out, nil
}

// alive reports whether pid is a process that has not exited: gone from
// /proc, or a zombie waiting for a parent to reap it, is not alive.
func alive(pid int) bool {
	st, err := readStat(pid)
	return err == nil && st.state != 'Z' && st.state != 'X'
}

// signalAll sends sig to every pid, ignoring those already gone.
func signalAll(pids []int, sig syscall.Signal) error {
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("pgserver: signal %v to %d: %w", sig, pid, err))
		}
	}
	return errors.Join(errs...)
}

// waitState polls /proc until every pid that is still alive is stopped
// (stopped true: state T, or t under a tracer) or running again (false).
// A signal is delivered when its target is next scheduled, which on a
// busy machine is not yet when kill(2) returns.
func waitState(pids []int, stopped bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		var pending []int
		for _, pid := range pids {
			st, err := readStat(pid)
			if err != nil || st.state == 'Z' || st.state == 'X' {
				continue // gone
			}
			if isStopped := st.state == 'T' || st.state == 't'; isStopped != stopped {
				pending = append(pending, pid)
			}
		}
		if len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			what := "stop"
			if !stopped {
				what = "continue"
			}
			return fmt.Errorf("pgserver: processes %v did not %s within %v", pending, what, timeout)
		}
		<-tick.C
	}
}
