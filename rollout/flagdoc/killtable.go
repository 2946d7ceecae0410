package flagdoc

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/seed31b0e981/reservoir/internal/controldb"
)

// KillVersionBits is how many low bits of a decision's epoch hold the kill
// switch document's version when the modes come from a source reservoir
// does not write (flagsource.Epoch): 2^20, about a million changes.
const KillVersionBits = 20

// MaxKillVersion is the highest version KillTable writes: the epoch holds
// no more.
const MaxKillVersion = 1<<KillVersionBits - 1

// MaxProviderVersion is the highest version a provider may answer beside a
// kill switch document: the epoch must stay within 2^63.
const MaxProviderVersion = 1<<(63-KillVersionBits) - 1

// ErrEpochOverflow is wrapped by Epoch's error for a version it cannot
// hold.
var ErrEpochOverflow = errors.New("version out of the epoch's range")

// Epoch is the handoff epoch of a decision whose mode comes from a
// provider at version provider and whose kill switch document is at
// version kill: provider<<KillVersionBits | kill. Ordered first by the
// provider's version, then by the kill switch's, it grows whenever either
// grows (each only grows), and two replicas that hold the same two
// versions compute the same epoch. A provider that answers no version
// (0) leaves the epoch to the kill switch alone: its mode changes then
// move no fence (docs/flags.md). The replicas' sources make it
// (flagsource), and the rollout's status judges their reports by it.
func Epoch(provider, kill int64) (int64, error) {
	if provider < 0 || provider > MaxProviderVersion {
		return 0, fmt.Errorf("rollout: the provider's version %d is outside 0..%d beside reservoir's kill switch: %w", provider, int64(MaxProviderVersion), ErrEpochOverflow)
	}
	if kill < 0 || kill > MaxKillVersion {
		return 0, fmt.Errorf("rollout: the kill switch document's version %d is outside 0..%d: %w", kill, MaxKillVersion, ErrEpochOverflow)
	}
	return provider<<KillVersionBits | kill, nil
}

// ErrFlagsExternal is wrapped by a refusal to write flags that live where
// reservoir does not write them.
var ErrFlagsExternal = errors.New("reservoir does not write these flags")

// ErrModesExternal is wrapped by KillTable's refusal of a change to a
// mode: the modes are served by a source reservoir does not write.
var ErrModesExternal = fmt.Errorf("the modes are served elsewhere: %w", ErrFlagsExternal)

var (
	_ FlagStore = KillTable{}
	_ TxStore   = KillTable{}
)

// KillTable is the FlagStore of a fleet whose modes come from a source
// reservoir does not write (a flagd daemon, an OFREP endpoint, any
// OpenFeature provider): reservoir's own kill switch, kept in the control
// database (rollout_flags, row 2) as a flags document whose modes are
// never used. Every replica follows it beside the mode source
// (flagsource.Config.Kills), and the stronger kill switch of the two
// wins, so `reservoir rollout kill`, the admin API and the automatic
// controller engage and release the switch whatever serves the modes.
// A change to a mode is refused (ErrModesExternal), naming where the modes
// are served.
//
// A control database without the document has no switch engaged: Read
// answers the code defaults at version 0, and the first change writes
// version 1.
type KillTable struct {
	// DB is the control database (migrated). Required.
	DB *sql.DB
	// Modes names what serves the modes, for messages: "the flagd daemon
	// at flagd:8015".
	Modes string
	// Timeout bounds each read or write. Default: 5s.
	Timeout time.Duration
}

func (k KillTable) table() FlagsTable {
	return FlagsTable{DB: k.DB, Timeout: k.Timeout, doc: controldb.KillDoc}
}

// String implements FlagStore.
func (k KillTable) String() string {
	return "control database (rollout_flags row 2: the kill switch; the modes are served by " + k.Modes + ")"
}

// Read implements FlagStore: the kill switches, with the modes at their
// code defaults (they are not reservoir's to read); version 0 while no
// switch was ever engaged.
func (k KillTable) Read() (*Flags, error) {
	f, err := k.table().Read()
	if errors.Is(err, fs.ErrNotExist) {
		return noDocument(), nil
	}
	return f, err
}

// Write implements FlagStore: a document from scratch, which must leave
// the modes at their code defaults.
func (k KillTable) Write(f *Flags) error {
	if err := k.checkModes(noDocument(), f); err != nil {
		return err
	}
	if f.Version > MaxKillVersion {
		return k.tooHigh(f.Version)
	}
	return k.table().Write(f)
}

// Update implements FlagStore.
func (k KillTable) Update(change func(*Flags) error) (before, after *Flags, err error) {
	return k.UpdateAt(-1, change)
}

// UpdateAt implements FlagStore; a negative version accepts any. A change
// that touches a mode is refused and writes nothing.
func (k KillTable) UpdateAt(version int64, change func(*Flags) error) (before, after *Flags, err error) {
	return k.UpdateAtTx(version, change, nil)
}

// Database implements TxStore.
func (k KillTable) Database() *sql.DB { return k.DB }

// UpdateAtTx implements TxStore, refusing what UpdateAt refuses.
func (k KillTable) UpdateAtTx(version int64, change func(*Flags) error, also func(ctx context.Context, tx *sql.Tx, before, after *Flags) error) (before, after *Flags, err error) {
	return k.table().change(version, func(cur *Flags) (*Flags, error) {
		next, err := NextFlags(cur, change)
		if err != nil {
			return nil, err
		}
		if err := k.checkModes(cur, next); err != nil {
			return nil, err
		}
		if next.Version > MaxKillVersion {
			return nil, k.tooHigh(next.Version)
		}
		return next, nil
	}, also)
}

// ReplaceInvalid replaces a kill switch document that ParseFlags refuses
// (see FlagsTable.ReplaceInvalid); f must leave the modes at their code
// defaults.
func (k KillTable) ReplaceInvalid(doc []byte, f *Flags) error {
	return k.ReplaceInvalidTx(doc, f, nil)
}

// ReplaceInvalidTx implements TxStore, refusing what ReplaceInvalid
// refuses.
func (k KillTable) ReplaceInvalidTx(doc []byte, f *Flags, also func(ctx context.Context, tx *sql.Tx) error) error {
	if err := k.checkModes(noDocument(), f); err != nil {
		return err
	}
	return k.table().replace(doc, f, also)
}

func (k KillTable) tooHigh(v int64) error {
	return fmt.Errorf("rollout: the kill switch document would reach version %d, above %d, the most a decision's epoch holds", v, MaxKillVersion)
}

// checkModes refuses next when its modes differ from was's.
func (k KillTable) checkModes(was, next *Flags) error {
	a, err := modesOf(was).Render()
	if err != nil {
		return err
	}
	b, err := modesOf(next).Render()
	if err != nil {
		return err
	}
	if !bytes.Equal(a, b) {
		return fmt.Errorf("rollout: cannot change a mode here: the modes are served by %s; change them there (reservoir writes only its kill switch): %w", k.Modes, ErrModesExternal)
	}
	return nil
}

// modesOf is f without its kill switches, at version 1: what two
// documents must share for a change between them to touch only kill
// switches.
func modesOf(f *Flags) *Flags {
	m := f.Clone()
	m.Version, m.Kill = 1, KillSwitch{}
	for name, p := range m.Pods {
		p.Kill = KillSwitch{}
		m.putPod(name, p)
	}
	for id, s := range m.Shops {
		s.Kill = KillSwitch{}
		m.putShop(id, s)
	}
	return m
}
