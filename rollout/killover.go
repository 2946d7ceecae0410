package rollout

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"

	"github.com/seed31b0e981/reservoir/internal/controldb"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
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

// overInvalid is a kill switch change to write over an invalid document.
type overInvalid struct {
	bad *flagdoc.InvalidFlagsError
	// version is the version to write: above every version seen.
	version int64
	// from says what the change builds on, for the operator and the audit.
	from string
}

// flagsForKill reads the flags a kill switch change builds on. When the
// store holds an invalid document, or one the replicas refuse (refused),
// it returns instead the last valid flags (recoverFlags), and the plan to
// write over it.
func (c *Controller) flagsForKill(ctx context.Context) (*flagdoc.Flags, *overInvalid, error) {
	// The replicas' highest version judges the flags (refused): read side
	// by side with them, one round trip where there were two in a row.
	var (
		applied    int64
		appliedErr error
		read       = make(chan struct{})
	)
	go func() {
		defer close(read)
		applied, appliedErr = c.appliedHighest(ctx)
	}()
	cur, err := c.cfg.Flags.Read()
	<-read
	var bad *flagdoc.InvalidFlagsError
	switch {
	case err == nil:
		if cur.Version == 0 {
			// No document yet (a KillTable before its first switch):
			// nothing the replicas could refuse; the change writes the
			// first.
			return cur, nil, nil
		}
		if appliedErr != nil {
			return nil, nil, fmt.Errorf("rollout: read the replicas' versions: %w", appliedErr)
		}
		if bad, err = c.refused(ctx, cur, applied); err != nil || bad == nil {
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
	if appliedErr != nil {
		return nil, nil, fmt.Errorf("%w; and the replicas' versions could not be read: %w", bad, appliedErr)
	}
	base, over, err := recoverFlags(ctx, c.cfg.DB, bad, inForce, applied)
	if err != nil {
		return nil, nil, fmt.Errorf("%w; and the last valid flags could not be read: %w", bad, err)
	}
	return base, over, nil
}

// refused returns an *InvalidFlagsError for the stored flags cur, valid
// on their own, when the replicas refuse them (flagdoc.CheckVersion): their
// version is below applied, the highest version a replica reported applied
// (appliedHighest), or a
// flag source in this process (ControllerConfig.InForce) answers from a
// different document at the same or a higher version. Such a document is
// written by hand (the controller's own writes grow); a change written
// on top of it, at its version plus one, would be refused by the replicas
// too (and WaitObeyed would count the replicas already further on as
// obeying it), so the kill switch writes over it as over any invalid
// document, above every version seen. nil when the replicas take cur.
func (c *Controller) refused(ctx context.Context, cur *flagdoc.Flags, applied int64) (*flagdoc.InvalidFlagsError, error) {
	var inForce []byte
	var inForceVersion int64
	if c.cfg.InForce != nil {
		if doc, ok := c.cfg.InForce(); ok {
			if f, err := flagdoc.ParseFlags(doc); err == nil && f.Version >= cur.Version {
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
	if raw, ok, err := flagdoc.StoredDocument(ctx, c.cfg.Flags); err != nil {
		return nil, err
	} else if ok {
		doc = raw
	}
	var why error
	switch {
	case cur.Version < applied:
		why = fmt.Errorf("the replicas refuse it: %w", flagdoc.CheckVersion(cur.Version, applied))
	case inForce != nil && !bytes.Equal(inForce, doc):
		why = fmt.Errorf("the flag source refuses it: %w", flagdoc.CheckVersion(cur.Version, inForceVersion))
	default:
		return nil, nil
	}
	return &flagdoc.InvalidFlagsError{Store: c.cfg.Flags.String(), Document: doc, Version: cur.Version, Err: why}, nil
}

// appliedHighest is the highest version of the controller's document any
// replica reported applied: the flags document's, or, with a KillTable,
// the kill switch document's part of the epochs the replicas report.
func (c *Controller) appliedHighest(ctx context.Context) (int64, error) {
	if mask := c.killBits(); mask != 0 {
		return controldb.AppliedHighestLow(ctx, c.cfg.DB, mask)
	}
	return controldb.AppliedHighest(ctx, c.cfg.DB)
}

// killBits is the mask of a replica's reported version that is the
// controller's document's: the kill switch document's bits of an epoch
// (flagsource.Epoch) with a KillTable, 0 (the whole version) otherwise.
func (c *Controller) killBits() int64 {
	if _, ok := c.cfg.Flags.(flagdoc.KillTable); ok {
		return flagdoc.MaxKillVersion
	}
	return 0
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
func recoverFlags(ctx context.Context, db *sql.DB, bad *flagdoc.InvalidFlagsError, inForce []byte, applied int64) (*flagdoc.Flags, *overInvalid, error) {
	audit, err := controldb.ListAuditFlags(ctx, db)
	if err != nil {
		return nil, nil, fmt.Errorf("rollout: read the audit: %w", err)
	}
	var (
		base *flagdoc.Flags
		from string
		seen = bad.Version
	)
	for _, a := range audit {
		seen = max(seen, flagdoc.HighestVersion([]byte(a.After)))
		if base != nil {
			continue
		}
		if f, err := flagdoc.ParseFlags([]byte(a.After)); err == nil {
			base, from = f, fmt.Sprintf("the last valid flags in the audit (entry %d, version %d)", a.ID, f.Version)
		}
	}
	if f, err := flagdoc.ParseFlags(inForce); inForce != nil && err == nil && (base == nil || f.Version > base.Version) {
		base, from = f, fmt.Sprintf("the flags this replica answers from (version %d)", f.Version)
	}
	if base == nil {
		base, from = flagdoc.NewFlags(), "the code defaults (no valid flags in the audit: every mode is redis again)"
	} else if applied > base.Version {
		from += fmt.Sprintf("; replicas reported version %d, so changes made since outside the controller are not carried over", applied)
	}
	seen = max(seen, applied, base.Version)
	if seen >= flagdoc.MaxVersion {
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
func (c *Controller) killOverInvalid(ctx context.Context, scope flagdoc.Scope, action string, stage int, base *flagdoc.Flags, over *overInvalid, o KillOptions, edit func(*flagdoc.Flags) error) error {
	if o.Out == nil {
		o.Out = io.Discard
	}
	action += "_over_invalid"
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
	note := over.bad.Error() + "; wrote " + plan
	reason := o.Reason + " [" + note + "]"
	ts, inTx := c.auditTx()
	if inTx {
		// The replacement and its audit in one transaction, as change
		// writes a kill switch's.
		err = ts.ReplaceInvalidTx(over.bad.Document, next, func(ctx context.Context, tx *sql.Tx) error {
			return c.insertAudit(ctx, tx, c.cfg.Now().UTC(), o.Actor, action, scope.String(), reason, stage, over.bad.Document, after)
		})
	} else {
		err = replaceInvalid(c.cfg.Flags, over.bad.Document, next)
	}
	if err != nil {
		if errors.Is(err, flagdoc.ErrFlagsChanged) {
			if aerr := c.audit(ctx, c.cfg.Now().UTC(), o.Actor, action+"_conflict", scope.String(), err.Error(), stage, over.bad.Document, nil); aerr != nil {
				err = errors.Join(err, aerr)
			}
		}
		return err
	}
	c.wrote()
	fmt.Fprintln(o.Out, note)
	if !inTx {
		if err := c.audit(ctx, c.cfg.Now().UTC(), o.Actor, action, scope.String(), reason, stage, over.bad.Document, after); err != nil {
			return err
		}
	}
	c.obey(ctx, after, o.Out, o.Fleet)
	return nil
}

// replaceInvalid writes f over the invalid document doc in store: only
// while the store still holds doc, where the store can tell (FlagsFile,
// FlagsTable).
func replaceInvalid(store flagdoc.FlagStore, doc []byte, f *flagdoc.Flags) error {
	if r, ok := store.(interface {
		ReplaceInvalid(doc []byte, f *flagdoc.Flags) error
	}); ok {
		return r.ReplaceInvalid(doc, f)
	}
	return store.Write(f)
}
