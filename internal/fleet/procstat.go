package fleet

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcStat is what the kernel says of a process: the CPU time it has
// used, user and system, and its resident memory.
type ProcStat struct {
	CPU time.Duration
	RSS int64 // bytes
}

// userHZ is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on every
// Linux architecture Go runs on.
const userHZ = 100

// ReadProcStat reads a process's CPU time from /proc/<pid>/stat and its
// resident memory (VmRSS) from /proc/<pid>/status: Linux only.
func ReadProcStat(pid int) (ProcStat, error) {
	var ps ProcStat
	if pid <= 0 {
		return ps, errors.New("no process")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ps, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields after it are counted from its closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ps, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return ps, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return ps, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	ps.CPU = time.Duration(utime+stime) * time.Second / userHZ
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return ps, fmt.Errorf("/proc/%d/status: VmRSS: %w", pid, err)
			}
			ps.RSS = kb << 10
		}
	}
	return ps, nil
}
