package flagdoc

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"

	"github.com/seed31b0e981/reservoir/internal/controldb"
)

// InvalidFlagsError is the error (wrapped) of FlagsFile's and FlagsTable's
// Read, Update and UpdateAt when the store holds a flags document that
// ParseFlags refuses. It carries the document, so a kill switch can write
// over it (Controller.Kill, Controller.Release); nothing else does.
type InvalidFlagsError struct {
	// Store names the store (FlagStore.String).
	Store string
	// Document is the document as stored.
	Document []byte
	// Version is the highest version the document shows as far as it can
	// be read (every number after a "version" key, and the control
	// database's row version): a document written over it must be at a
	// higher one. 0 when none can be read.
	Version int64
	// Err is ParseFlags' error: the problem's line and column, or its
	// JSON path.
	Err error
}

// Error implements error.
func (e *InvalidFlagsError) Error() string {
	return fmt.Sprintf("rollout: %s holds an invalid flags document: %v", e.Store, e.Err)
}

// Unwrap returns ParseFlags' error.
func (e *InvalidFlagsError) Unwrap() error { return e.Err }

// versionKey finds the numbers a document gives its "version" keys, even
// in a document that is not JSON any more.
var versionKey = regexp.MustCompile(`"version"\s*:\s*([0-9]{1,16})`)

// HighestVersion is the highest number data gives a "version" key (0 for
// none), at most MaxVersion.
func HighestVersion(data []byte) int64 {
	var v int64
	for _, m := range versionKey.FindAllSubmatch(data, -1) {
		if n, err := strconv.ParseInt(string(m[1]), 10, 64); err == nil {
			v = max(v, min(n, MaxVersion))
		}
	}
	return v
}

// ReplaceInvalid replaces a flags document that ParseFlags refuses, doc
// (an InvalidFlagsError's Document), with f at f.Version, atomically, and
// only while the file still holds exactly doc: if it changed since (a fix,
// another operator's kill), nothing is written and the error wraps
// ErrFlagsChanged. It never parses doc.
func (ff FlagsFile) ReplaceInvalid(doc []byte, f *Flags) error {
	unlock, err := lockFlags(ff.Path)
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := os.ReadFile(ff.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rollout: read flags file: %w", err)
	}
	if err != nil || !bytes.Equal(cur, doc) {
		return fmt.Errorf("%w: %s changed since it was read: read the flags again", ErrFlagsChanged, ff)
	}
	_, err = ff.write(f)
	return err
}

// ReplaceInvalid replaces a flags document that ParseFlags refuses, doc
// (an InvalidFlagsError's Document), with f at f.Version, only while the
// control database still holds exactly doc: if it changed since, nothing
// is written and the error wraps ErrFlagsChanged. It never parses doc.
func (t FlagsTable) ReplaceInvalid(doc []byte, f *Flags) error {
	return t.replace(doc, f, nil)
}

// ReplaceInvalidTx implements TxStore.
func (t FlagsTable) ReplaceInvalidTx(doc []byte, f *Flags, also func(ctx context.Context, tx *sql.Tx) error) error {
	return t.replace(doc, f, also)
}

// replace writes f as the document under the row lock, without parsing
// the document it replaces, and also (when not nil) in the same
// transaction before its commit; with expect non-nil, only over exactly
// that document.
func (t FlagsTable) replace(expect []byte, f *Flags, also func(ctx context.Context, tx *sql.Tx) error) (err error) {
	if t.DB == nil {
		return errors.New("rollout: FlagsTable.DB is required")
	}
	data, err := f.Render()
	if err != nil {
		return err
	}
	ctx, cancel := t.ctx()
	defer cancel()
	tx, err := t.DB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("rollout: write the flags: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	version, doc, lockErr := controldb.LockFlags(ctx, tx, t.row())
	exists := true
	switch {
	case errors.Is(lockErr, sql.ErrNoRows):
		exists = false
	case lockErr != nil:
		return fmt.Errorf("rollout: read the flags for a change: %w", lockErr)
	}
	if expect != nil && (!exists || doc != string(expect)) {
		return fmt.Errorf("%w: the control database's flags changed since they were read: read the flags again", ErrFlagsChanged)
	}
	if expect == nil && exists {
		// A Write: the row's version counts as much as the document's (a
		// row edited by hand may show either higher).
		if err := growsOver(t, []byte(doc), data, max(version, storedVersion([]byte(doc))), f); err != nil {
			return err
		}
	}
	// An unchanged document is not written again; what also adds still is.
	unchanged := exists && doc == string(data)
	if unchanged && also == nil {
		return tx.Rollback()
	}
	if !unchanged {
		if err := t.writeRow(ctx, tx, exists, f.Version, data); err != nil {
			return err
		}
	}
	if also != nil {
		if err = also(ctx, tx); err != nil {
			return err
		}
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("rollout: write the flags: %w", err)
	}
	return nil
}

// StoredDocument reads the document store holds, byte for byte, where the
// store can tell (FlagsFile, FlagsTable); ok is false elsewhere.
func StoredDocument(ctx context.Context, store FlagStore) (doc []byte, ok bool, err error) {
	switch st := store.(type) {
	case FlagsFile:
		doc, err = os.ReadFile(st.Path)
		if err != nil {
			return nil, false, fmt.Errorf("rollout: read flags file: %w", err)
		}
		return doc, true, nil
	case KillTable:
		return StoredDocument(ctx, st.table())
	case FlagsTable:
		_, text, err := controldb.ReadFlags(ctx, st.DB, st.row())
		if err != nil {
			return nil, false, fmt.Errorf("rollout: read the flags from the control database: %w", err)
		}
		return []byte(text), true, nil
	}
	return nil, false, nil
}
