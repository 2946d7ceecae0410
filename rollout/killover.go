package rollout

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"time"
)

// The kill switch works whatever the state of the flags. A flags document
// broken by hand (invalid JSON, an unknown variant, flags that disagree on
// their version) is refused by every replica, which keep their last valid
// flags; a kill switch that first had to parse the broken document would
// refuse too, in the very incident it is for. So when the store holds a
// document ParseFlags refuses, Kill and Release write a valid one instead:
// the last valid flags (the audit's, or those a local flag source answers
// from when newer; else the code defaults) plus the change, at a version
// above every one seen, and audit it as such
// ("kill_over_invalid", the broken document as before_flags).

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

// highestVersion is the highest number data gives a "version" key (0 for
// none), at most maxVersion.
func highestVersion(data []byte) int64 {
	var v int64
	for _, m := range versionKey.FindAllSubmatch(data, -1) {
		if n, err := strconv.ParseInt(string(m[1]), 10, 64); err == nil {
			v = max(v, min(n, maxVersion))
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
	return t.replace(doc, f)
}

// replace writes f as the document under the row lock, without parsing
// the document it replaces; with expect non-nil, only over exactly that
// document.
func (t FlagsTable) replace(expect []byte, f *Flags) (err error) {
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
	var (
		version int64
		doc     string
		exists  = true
	)
	switch err := tx.QueryRowContext(ctx, sqlFlagsLock).Scan(&version, &doc); {
	case errors.Is(err, sql.ErrNoRows):
		exists = false
	case err != nil:
		return fmt.Errorf("rollout: read the flags for a change: %w", err)
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
	if exists && doc == string(data) {
		return tx.Rollback()
	}
	now := time.Now().UTC()
	if exists {
		_, err = tx.ExecContext(ctx, sqlFlagsUpdate, f.Version, string(data), now)
	} else {
		_, err = tx.ExecContext(ctx, sqlFlagsInsert, f.Version, string(data), now)
	}
	if err != nil {
		if mysqlDuplicate(err) {
			err = fmt.Errorf("%w: another writer created the flags first", ErrFlagsChanged)
		}
		return fmt.Errorf("rollout: write the flags: %w", err)
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("rollout: write the flags: %w", err)
	}
	return nil
}

// The statements the kill switch reads to rebuild flags over an invalid
// document (control database).
const (
	// sqlAuditFlags reads the flags the latest changes left, newest first.
	sqlAuditFlags = `/*caller='rollout'*/ SELECT id, after_flags FROM rollout_audit WHERE after_flags <> '' ORDER BY id DESC LIMIT 500`
	// sqlAppliedHighest is the highest version any replica reported.
	sqlAppliedHighest = `/*caller='rollout'*/ SELECT COALESCE(MAX(applied_version), 0) FROM rollout_replicas`
)

// overInvalid is a kill switch change to write over an invalid document.
type overInvalid struct {
	bad *InvalidFlagsError
	// version is the version to write: above every version seen.
	version int64
	// from says what the change builds on, for the operator and the audit.
	from string
}

// flagsForKill reads the flags a kill switch change builds on. When the
// store holds an invalid document, or one the replicas refuse (refused),
// it returns instead the last valid flags (recoverFlags), and the plan to
// write over it.
func (c *Controller) flagsForKill(ctx context.Context) (*Flags, *overInvalid, error) {
	cur, err := c.cfg.Flags.Read()
	var bad *InvalidFlagsError
	switch {
	case err == nil:
		if bad, err = c.refused(ctx, cur); err != nil || bad == nil {
			return cur, nil, err
		}
	case !errors.As(err, &bad):
		return cur, nil, err
	}
	var inForce []byte
	if c.cfg.InForce != nil {
		if doc, ok := c.cfg.InForce(); ok {
			inForce = doc
		}
	}
	base, over, err := recoverFlags(ctx, c.cfg.DB, bad, inForce)
	if err != nil {
		return nil, nil, fmt.Errorf("%w; and the last valid flags could not be read: %w", bad, err)
	}
	return base, over, nil
}

// refused returns an *InvalidFlagsError for the stored flags cur, valid
// on their own, when the replicas refuse them (checkVersion): their
// version is below the highest version a replica reported applied, or a
// flag source in this process (ControllerConfig.InForce) answers from a
// different document at the same or a higher version. Such a document is
// written by hand (the controller's own writes grow); a change written
// on top of it, at its version plus one, would be refused by the replicas
// too (and WaitObeyed would count the replicas already further on as
// obeying it), so the kill switch writes over it as over any invalid
// document, above every version seen. nil when the replicas take cur.
func (c *Controller) refused(ctx context.Context, cur *Flags) (*InvalidFlagsError, error) {
	var applied int64
	if err := c.cfg.DB.QueryRowContext(ctx, sqlAppliedHighest).Scan(&applied); err != nil {
		return nil, fmt.Errorf("rollout: read the replicas' versions: %w", err)
	}
	var inForce []byte
	var inForceVersion int64
	if c.cfg.InForce != nil {
		if doc, ok := c.cfg.InForce(); ok {
			if f, err := ParseFlags(doc); err == nil && f.Version >= cur.Version {
				inForce, inForceVersion = doc, f.Version
			}
		}
	}
	rendered, err := cur.Render()
	if err != nil {
		return nil, err
	}
	if cur.Version >= applied && (inForce == nil || bytes.Equal(inForce, rendered)) {
		return nil, nil
	}
	// The document as stored, for the comparison and for the kill
	// switch's compare-and-swap over it (rendered, where the store cannot
	// tell: it is what cur means).
	doc := rendered
	if raw, ok, err := storedDocument(ctx, c.cfg.Flags); err != nil {
		return nil, err
	} else if ok {
		doc = raw
	}
	var why error
	switch {
	case cur.Version < applied:
		why = fmt.Errorf("the replicas refuse it: %w", checkVersion(cur.Version, applied))
	case inForce != nil && !bytes.Equal(inForce, doc):
		why = fmt.Errorf("the flag source refuses it: %w", checkVersion(cur.Version, inForceVersion))
	default:
		return nil, nil
	}
	return &InvalidFlagsError{Store: c.cfg.Flags.String(), Document: doc, Version: cur.Version, Err: why}, nil
}

// storedDocument reads the document store holds, byte for byte, where the
// store can tell (FlagsFile, FlagsTable); ok is false elsewhere.
func storedDocument(ctx context.Context, store FlagStore) (doc []byte, ok bool, err error) {
	switch st := store.(type) {
	case FlagsFile:
		doc, err = os.ReadFile(st.Path)
		if err != nil {
			return nil, false, fmt.Errorf("rollout: read flags file: %w", err)
		}
		return doc, true, nil
	case FlagsTable:
		var version int64
		var text string
		if err := st.DB.QueryRowContext(ctx, sqlFlagsRead).Scan(&version, &text); err != nil {
			return nil, false, fmt.Errorf("rollout: read the flags from the control database: %w", err)
		}
		return []byte(text), true, nil
	}
	return nil, false, nil
}

// recoverFlags returns the flags to build on over the invalid document
// bad: the newest audit entry whose after_flags parse, or inForce (the
// document a local flag source answers from; nil for none) when it parses
// at a higher version, else NewFlags().
// The version to write is one above the highest seen anywhere: the audit,
// the invalid document (as far as it can be read), and every replica's
// applied version (the stores' fences carry the versions replicas decided
// at; a change at a version they have seen would be stale to them,
// docs/ownership.md section 2).
func recoverFlags(ctx context.Context, db *sql.DB, bad *InvalidFlagsError, inForce []byte) (*Flags, *overInvalid, error) {
	rows, err := db.QueryContext(ctx, sqlAuditFlags)
	if err != nil {
		return nil, nil, fmt.Errorf("rollout: read the audit: %w", err)
	}
	defer rows.Close()
	var (
		base *Flags
		from string
		seen = bad.Version
	)
	for rows.Next() {
		var (
			id    int64
			after string
		)
		if err := rows.Scan(&id, &after); err != nil {
			return nil, nil, fmt.Errorf("rollout: read the audit: %w", err)
		}
		seen = max(seen, highestVersion([]byte(after)))
		if base != nil {
			continue
		}
		if f, err := ParseFlags([]byte(after)); err == nil {
			base, from = f, fmt.Sprintf("the last valid flags in the audit (entry %d, version %d)", id, f.Version)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("rollout: read the audit: %w", err)
	}
	var applied int64
	if err := db.QueryRowContext(ctx, sqlAppliedHighest).Scan(&applied); err != nil {
		return nil, nil, fmt.Errorf("rollout: read the replicas' versions: %w", err)
	}
	if f, err := ParseFlags(inForce); inForce != nil && err == nil && (base == nil || f.Version > base.Version) {
		base, from = f, fmt.Sprintf("the flags this replica answers from (version %d)", f.Version)
	}
	if base == nil {
		base, from = NewFlags(), "the code defaults (no valid flags in the audit: every mode is redis again)"
	} else if applied > base.Version {
		from += fmt.Sprintf("; replicas reported version %d, so changes made since outside the controller are not carried over", applied)
	}
	seen = max(seen, applied, base.Version)
	if seen >= maxVersion {
		return nil, nil, fmt.Errorf("rollout: version %d seen: no higher version can be written", seen)
	}
	return base, &overInvalid{bad: bad, version: seen + 1, from: from}, nil
}

// killOverInvalid writes a kill switch change (edit, on base) over the
// invalid document over.bad, or prints it with o.DryRun; audits it as
// action+"_over_invalid" with the invalid document as before_flags and
// waits for the fleet to obey. If the document changed since it was read,
// nothing is written, the attempt is audited (action+"_over_invalid_conflict")
// and the error wraps ErrFlagsChanged.
func (c *Controller) killOverInvalid(ctx context.Context, scope Scope, action string, base *Flags, over *overInvalid, o KillOptions, edit func(*Flags) error) error {
	if o.Out == nil {
		o.Out = io.Discard
	}
	action += "_over_invalid"
	stage, _, err := c.state(ctx)
	if err != nil {
		return err
	}
	next := base.Clone()
	if err := edit(next); err != nil {
		return err
	}
	next.Version = over.version
	after, err := next.Render()
	if err != nil {
		return err
	}
	plan := fmt.Sprintf("a valid document at version %d built from %s", over.version, over.from)
	if o.DryRun {
		fmt.Fprintf(o.Out, "%s; dry run: would write %s (nothing written)\n--- %s (invalid)\n+++ %s (after)\n", over.bad, plan, c.cfg.Flags, c.cfg.Flags)
		_, err = io.WriteString(o.Out, lineDiff(string(over.bad.Document), string(after)))
		return err
	}
	if err := replaceInvalid(c.cfg.Flags, over.bad.Document, next); err != nil {
		if errors.Is(err, ErrFlagsChanged) {
			if aerr := c.audit(ctx, c.cfg.Now().UTC(), o.Actor, action+"_conflict", scope.String(), err.Error(), stage, over.bad.Document, nil); aerr != nil {
				err = errors.Join(err, aerr)
			}
		}
		return err
	}
	note := over.bad.Error() + "; wrote " + plan
	fmt.Fprintln(o.Out, note)
	if err := c.audit(ctx, c.cfg.Now().UTC(), o.Actor, action, scope.String(), o.Reason+" ["+note+"]", stage, over.bad.Document, after); err != nil {
		return err
	}
	c.obey(ctx, after, o.Out, o.Fleet)
	return nil
}

// replaceInvalid writes f over the invalid document doc in store: only
// while the store still holds doc, where the store can tell (FlagsFile,
// FlagsTable).
func replaceInvalid(store FlagStore, doc []byte, f *Flags) error {
	if r, ok := store.(interface {
		ReplaceInvalid(doc []byte, f *Flags) error
	}); ok {
		return r.ReplaceInvalid(doc, f)
	}
	return store.Write(f)
}
