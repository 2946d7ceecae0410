//go:build unix

package flagdoc

import (
	"fmt"
	"os"
	"syscall"
)

// lockFlags takes an exclusive advisory lock on "<path>.lock", waiting for
// other writers. The lock file is left in place: deleting it would let two
// writers lock different inodes.
func lockFlags(path string) (unlock func(), err error) {
	if path == "" {
		return nil, fmt.Errorf("rollout: FlagsFile.Path is required")
	}
	f, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("rollout: lock flags file: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("rollout: lock flags file: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
