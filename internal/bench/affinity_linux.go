package bench

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// pin sets the CPU affinity of every thread of process pid to cpus, and
// returns the affinity its main thread had. Threads the process starts
// later inherit it from the thread that starts them, all of which are
// pinned.
func pin(pid int, cpus []int) (old []int, err error) {
	var prev unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &prev); err != nil {
		return nil, fmt.Errorf("read the affinity of process %d: %w", pid, err)
	}
	for c := range runtime.NumCPU() * 8 {
		if prev.IsSet(c) {
			old = append(old, c)
		}
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, fmt.Errorf("list the threads of process %d: %w", pid, err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
			return old, fmt.Errorf("pin thread %d of process %d to CPUs %v: %w", tid, pid, cpus, err)
		}
	}
	return old, nil
}
