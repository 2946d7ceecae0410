package flagdoc

import (
	"errors"
	"fmt"
)

// ErrFlagsExternal is wrapped by every call of ExternalFlags: the flags
// live where reservoir does not write them.
var ErrFlagsExternal = errors.New("reservoir does not write these flags")

// ExternalFlags is the FlagStore of flags served by something reservoir
// does not manage, a flagd daemon (the topology's flags_source "flagd"):
// the daemon reads them from wherever it is set up to, and a change,
// the kill switch included, is made there. Every call fails, naming
// where the flags are served, so `reservoir rollout kill` and the admin
// API say where to go instead of pretending to act.
type ExternalFlags struct {
	// Where names what serves the flags, for the error: "the flagd daemon
	// at flagd:8015".
	Where string
}

var _ FlagStore = ExternalFlags{}

func (e ExternalFlags) refuse(what string) error {
	return fmt.Errorf("rollout: cannot %s the flags: they are served by %s; change them where it reads them: %w", what, e.Where, ErrFlagsExternal)
}

// String implements FlagStore.
func (e ExternalFlags) String() string { return e.Where }

// Read implements FlagStore: it fails with ErrFlagsExternal (reservoir
// does not read the daemon's source either).
func (e ExternalFlags) Read() (*Flags, error) { return nil, e.refuse("read") }

// Write implements FlagStore: it fails with ErrFlagsExternal.
func (e ExternalFlags) Write(*Flags) error { return e.refuse("write") }

// Update implements FlagStore: it fails with ErrFlagsExternal.
func (e ExternalFlags) Update(func(*Flags) error) (before, after *Flags, err error) {
	return nil, nil, e.refuse("change")
}

// UpdateAt implements FlagStore: it fails with ErrFlagsExternal.
func (e ExternalFlags) UpdateAt(int64, func(*Flags) error) (before, after *Flags, err error) {
	return nil, nil, e.refuse("change")
}
