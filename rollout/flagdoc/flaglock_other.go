//go:build !unix

package flagdoc

import "fmt"

// lockFlags does not lock where flock is missing: writers must not run
// concurrently there.
func lockFlags(path string) (unlock func(), err error) {
	if path == "" {
		return nil, fmt.Errorf("rollout: FlagsFile.Path is required")
	}
	return func() {}, nil
}
