package flagdoc

import (
	"errors"
	"fmt"
)

// CheckVersion is the rule a flags document's metadata.version follows
// before its flags are used, for every source that reads documents (the
// file, the control database, a flagd daemon: checkFlags) and for
// ParseFlags and Flags.Validate, which use it with nothing in force.
//
// The version is the epoch of every handoff between the stores
// (docs/ownership.md section 2), so:
//   - it is required, from 1 up: a decision at version 0 can never hand a
//     shop off (no fence is below 0), so flags without a version would
//     name a store (mysql, say) while every shop stays where its fence
//     is, and the replica's status, reads and releases would disagree with
//     what actually decides;
//   - it never goes back, and a changed document carries a higher one: the
//     fences already carry the version in force, so a change at that
//     version or below is stale to the stores and may never take effect.
//
// inForce is the version of the flags in force (0: none yet). The caller
// sets aside a document byte for byte the same as the one in force before
// asking: the same document read again is no change, and is neither
// refused nor logged.
func CheckVersion(version, inForce int64) error {
	switch {
	case version <= 0:
		return errors.New("metadata.version is required (a positive integer that grows with every change): " +
			"the flags carry none (or 0); write it in both flags, above every version the flags have had (1 for the first)")
	case inForce > 0 && version < inForce:
		return fmt.Errorf("metadata.version %d is lower than the version in force, %d: flags never go back; write a higher version", version, inForce)
	case inForce > 0 && version == inForce:
		return fmt.Errorf("metadata.version %d is the version in force, but the document changed: the version must grow with every change; write a higher version", version)
	}
	return nil
}
