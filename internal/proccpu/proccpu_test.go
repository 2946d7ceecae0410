package proccpu_test

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/proccpu"
)

// The test's own process: its CPU time grows while it spins; a pid that
// names no process reads as -1, as on a system without /proc.
func TestOf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/<pid>/stat is Linux's")
	}
	before := proccpu.Of(os.Getpid())
	if before < 0 {
		t.Fatalf("own process: %s", before)
	}
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
	}
	if after := proccpu.Of(os.Getpid()); after <= before {
		t.Errorf("after 100ms of spinning: %s, before %s", after, before)
	}
	for _, pid := range []int{0, -1, 1 << 30} {
		if got := proccpu.Of(pid); got != -1 {
			t.Errorf("pid %d: %s, want -1", pid, got)
		}
	}
}
