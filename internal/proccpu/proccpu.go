// Package proccpu reads how much CPU a local process has used, from
// /proc: what the benchmarks and the soak tests compare between two
// moments.
package proccpu

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux the project runs on.
const clockTick = 10 * time.Millisecond

// Of returns the CPU time (user + system) process pid has used, from
// /proc/<pid>/stat; -1 when it cannot be read (not Linux, not local,
// gone).
func Of(pid int) time.Duration {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// Field 2, "(comm)", may hold spaces: count fields after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	// After the comm: state is field 3, utime field 14, stime field 15.
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(utime+stime) * clockTick
}
