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

// FlagStore is where the flags document lives, for whoever changes it: a
// file that replicas on one host (or a shared volume) watch, FlagsFile, or
// the control database that every replica of a fleet polls, FlagsTable.
// The controller, the CLI and the admin API write through it; replicas
// read through a FlagSource on the same medium.
type FlagStore interface {
	// Read returns the current flags. No document yet is an error
	// wrapping fs.ErrNotExist; a document ParseFlags refuses, an error
	// wrapping *InvalidFlagsError (so do Update's and UpdateAt's).
	Read() (*Flags, error)
	// Write replaces the document with f, at f.Version as given (a
	// document from scratch); it skips the write when nothing changes,
	// and refuses a state without a version, or at a version not above
	// the document's (as far as it can be read: it writes over an invalid
	// document too), which every replica would refuse.
	Write(f *Flags) error
	// Update applies change to the current flags and writes the result at
	// the next version (NextFlags), serialised with every other writer;
	// it returns the flags before and after. A missing document starts
	// from the Redis-safe state (NewFlags), not numbered (version 0): the
	// first document is written at version 1.
	Update(change func(*Flags) error) (before, after *Flags, err error)
	// UpdateAt is Update for a writer that decided from the flags at
	// version: if they changed since, nothing is written and the error
	// wraps ErrFlagsChanged, naming both versions.
	UpdateAt(version int64, change func(*Flags) error) (before, after *Flags, err error)
	// String names the store for diffs and messages ("flags file
	// /etc/reservoir/flags.json", "control database").
	String() string
}

// ErrFlagsChanged is wrapped by UpdateAt's error when another writer
// changed the flags after the caller read them: its decision (the next
// stage, say) was made from flags that are no longer in force. Read them
// again and decide again.
var ErrFlagsChanged = errors.New("rollout: the flags changed since they were read")

var (
	_ FlagStore = FlagsFile{}
	_ FlagStore = FlagsTable{}
	_ TxStore   = FlagsTable{}
)

// TxStore is a FlagStore that changes the flags in a transaction of a
// database (FlagsTable, KillTable): a writer can add statements of its own
// to that transaction, which then commit with the flags or not at all.
// The controller writes a kill switch's audit row so: the change and its
// record are one commit, where they were two in a row on the operator's
// wait.
type TxStore interface {
	FlagStore
	// Database is the database the store's transactions run in: only
	// statements meant for it may join them.
	Database() *sql.DB
	// UpdateAtTx is UpdateAt that calls also in the change's transaction,
	// under the flags' row lock, after the new document is written (or
	// found unchanged, when nothing is written) and before the commit,
	// with the transaction's context (bounded by the store's Timeout) and
	// the flags before and after. An error from also rolls the change
	// back and is returned as it is. also is not called when the
	// change is refused (ErrFlagsChanged, an invalid document, an edit's
	// error).
	UpdateAtTx(version int64, change func(*Flags) error, also func(ctx context.Context, tx *sql.Tx, before, after *Flags) error) (before, after *Flags, err error)
	// ReplaceInvalidTx is ReplaceInvalid that calls also in the
	// replacement's transaction, as UpdateAtTx does.
	ReplaceInvalidTx(doc []byte, f *Flags, also func(ctx context.Context, tx *sql.Tx) error) error
}

// FlagsTable keeps the flags document in the control database (table
// rollout_flags, one row), for a fleet of replicas on many hosts: each
// replica's FlagSource polls its version (FlagSourceConfig.DB) and loads a
// new document within a poll interval. Writers serialise on the row's lock
// (SELECT ... FOR UPDATE), so two controllers on two hosts never
// interleave a read-modify-write; the document is validated before it is
// written, exactly as the file is.
type FlagsTable struct {
	// DB is the control database (migrated). Required.
	DB *sql.DB
	// Timeout bounds each read or write. Default: 5s.
	Timeout time.Duration

	// doc is the row: the flags document (zero), or KillTable's.
	doc controldb.Doc
}

// row is the rollout_flags row t keeps.
func (t FlagsTable) row() controldb.Doc {
	if t.doc == 0 {
		return controldb.FlagsDoc
	}
	return t.doc
}

// writeRow writes the document data at version in tx: an UPDATE of the
// flags row, or its INSERT when there was none (exists false), where a
// duplicate key means another writer created it first (ErrFlagsChanged).
func (t FlagsTable) writeRow(ctx context.Context, tx *sql.Tx, exists bool, version int64, data []byte) error {
	now := time.Now().UTC()
	var err error
	if exists {
		err = controldb.UpdateFlags(ctx, tx, t.row(), version, string(data), now)
	} else {
		err = controldb.InsertFlags(ctx, tx, t.row(), version, string(data), now)
	}
	if err != nil {
		if controldb.IsDuplicate(err) {
			err = fmt.Errorf("%w: another writer created the flags first", ErrFlagsChanged)
		}
		return fmt.Errorf("rollout: write the flags: %w", err)
	}
	return nil
}

func (t FlagsTable) ctx() (context.Context, context.CancelFunc) {
	d := t.Timeout
	if d <= 0 {
		d = 5 * time.Second
	}
	return context.WithTimeout(context.Background(), d)
}

// String implements FlagStore.
func (t FlagsTable) String() string { return "control database (rollout_flags)" }

// Read implements FlagStore.
func (t FlagsTable) Read() (*Flags, error) {
	ctx, cancel := t.ctx()
	defer cancel()
	version, doc, err := controldb.ReadFlags(ctx, t.DB, t.row())
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("rollout: no flags in the control database yet: %w", fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("rollout: read the flags from the control database: %w", err)
	}
	f, err := ParseFlags([]byte(doc))
	if err != nil {
		return nil, t.invalid(version, doc, err)
	}
	return f, nil
}

// Write implements FlagStore. The document it replaces need not parse:
// its version is the row's, or the highest the document shows.
func (t FlagsTable) Write(f *Flags) error {
	return t.replace(nil, f, nil)
}

// invalid is Read's error for a document ParseFlags refuses.
func (t FlagsTable) invalid(row int64, doc string, err error) *InvalidFlagsError {
	return &InvalidFlagsError{Store: t.String(), Document: []byte(doc), Version: max(row, HighestVersion([]byte(doc))), Err: err}
}

// Update implements FlagStore.
func (t FlagsTable) Update(change func(*Flags) error) (before, after *Flags, err error) {
	return t.UpdateAt(-1, change)
}

// UpdateAt implements FlagStore; a negative version accepts any.
func (t FlagsTable) UpdateAt(version int64, change func(*Flags) error) (before, after *Flags, err error) {
	return t.UpdateAtTx(version, change, nil)
}

// Database implements TxStore.
func (t FlagsTable) Database() *sql.DB { return t.DB }

// UpdateAtTx implements TxStore; a negative version accepts any.
func (t FlagsTable) UpdateAtTx(version int64, change func(*Flags) error, also func(ctx context.Context, tx *sql.Tx, before, after *Flags) error) (before, after *Flags, err error) {
	return t.change(version, func(cur *Flags) (*Flags, error) { return NextFlags(cur, change) }, also)
}

// change runs a read-modify-write of the document under its row lock,
// and also (when not nil) in the same transaction before its commit.
// expect >= 0 refuses it unless the document is at that version.
func (t FlagsTable) change(expect int64, next func(*Flags) (*Flags, error), also func(ctx context.Context, tx *sql.Tx, before, after *Flags) error) (before, after *Flags, err error) {
	if t.DB == nil {
		return nil, nil, errors.New("rollout: FlagsTable.DB is required")
	}
	ctx, cancel := t.ctx()
	defer cancel()
	tx, err := t.DB.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("rollout: change the flags: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	curVersion, doc, lockErr := controldb.LockFlags(ctx, tx, t.row())
	exists := true
	switch {
	case errors.Is(lockErr, sql.ErrNoRows):
		exists, before = false, noDocument()
	case lockErr != nil:
		return nil, nil, fmt.Errorf("rollout: read the flags for a change: %w", lockErr)
	default:
		if before, err = ParseFlags([]byte(doc)); err != nil {
			return nil, nil, t.invalid(curVersion, doc, err)
		}
	}
	if expect >= 0 && before.Version != expect {
		return nil, nil, fmt.Errorf("%w: decided at version %d, the control database is at version %d: read the flags again", ErrFlagsChanged, expect, before.Version)
	}
	if after, err = next(before); err != nil {
		return nil, nil, err
	}
	data, err := after.Render()
	if err != nil {
		return nil, nil, err
	}
	// An unchanged document is not written again; what also adds still is.
	unchanged := exists && bytes.Equal(data, []byte(doc))
	if unchanged && also == nil {
		return before, after, tx.Rollback()
	}
	if !unchanged {
		if err := t.writeRow(ctx, tx, exists, after.Version, data); err != nil {
			return nil, nil, err
		}
	}
	if also != nil {
		if err = also(ctx, tx, before, after); err != nil {
			return nil, nil, err
		}
	}
	if err = tx.Commit(); err != nil {
		return nil, nil, fmt.Errorf("rollout: write the flags: %w", err)
	}
	return before, after, nil
}
