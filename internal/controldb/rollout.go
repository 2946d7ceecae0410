package controldb

import (
	"context"
	"database/sql"
	"time"
)

// The rollout controller's state and audit (callers: rollout's Controller).
const (
	sqlStateRead  = `/*caller='rollout'*/ SELECT stage, since FROM rollout_state WHERE id = 1`
	sqlStateWrite = `/*caller='rollout'*/ INSERT INTO rollout_state (id, stage, since) VALUES (1, ?, ?)
  ON DUPLICATE KEY UPDATE stage = VALUES(stage), since = VALUES(since)`
	sqlAuditInsert = `/*caller='rollout'*/ INSERT INTO rollout_audit
  (at, actor, action, scope, reason, stage, before_flags, after_flags) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	sqlAuditList = `/*caller='rollout'*/ SELECT id, at, actor, action, scope, reason, stage, before_flags, after_flags
  FROM rollout_audit ORDER BY id DESC LIMIT ?`
	// sqlAuditFlags reads the flags the latest changes left, newest first.
	sqlAuditFlags = `/*caller='rollout'*/ SELECT id, after_flags FROM rollout_audit WHERE after_flags <> '' ORDER BY id DESC LIMIT 500`
)

// ReadState returns the index of the rollout stage in force and when it
// was applied (rollout_state's one row). sql.ErrNoRows: no stage was ever
// applied.
func ReadState(ctx context.Context, q Querier) (stage int, since time.Time, err error) {
	err = q.QueryRowContext(ctx, sqlStateRead).Scan(&stage, &since)
	return stage, since, err
}

// WriteState records stage as the one in force since since, creating the
// row the first time.
func WriteState(ctx context.Context, q Querier, stage int, since time.Time) error {
	_, err := q.ExecContext(ctx, sqlStateWrite, stage, since)
	return err
}

// AuditRow is one rollout_audit row: a change of the flags (or an attempt)
// and who made it, when and why.
type AuditRow struct {
	// ID is the row's id, assigned by the database (ignored by
	// InsertAudit).
	ID int64
	// At is when the change was made.
	At time.Time
	// Actor, Action, Scope and Reason say who did what, over which
	// scope, and why.
	Actor, Action, Scope, Reason string
	// Stage is the rollout stage in force at the change (NULL in rows
	// written without one).
	Stage sql.NullInt64
	// Before and After are the flags documents before and after the
	// change ("" for none).
	Before, After string
}

// InsertAudit appends r (its ID aside) to the audit.
func InsertAudit(ctx context.Context, q Querier, r AuditRow) error {
	_, err := q.ExecContext(ctx, sqlAuditInsert, r.At, r.Actor, r.Action, r.Scope, r.Reason, r.Stage, r.Before, r.After)
	return err
}

// ListAudit returns the latest limit audit rows, newest first.
func ListAudit(ctx context.Context, q Querier, limit int) ([]AuditRow, error) {
	rows, err := q.QueryContext(ctx, sqlAuditList, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AuditRow
	for rows.Next() {
		var r AuditRow
		if err := rows.Scan(&r.ID, &r.At, &r.Actor, &r.Action, &r.Scope, &r.Reason, &r.Stage, &r.Before, &r.After); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// AuditFlags is the flags document one audit row left.
type AuditFlags struct {
	// ID is the audit row's id.
	ID int64
	// After is its after_flags, never "".
	After string
}

// ListAuditFlags returns the flags documents the latest 500 changes left
// (rows with an after_flags), newest first: what a kill switch rebuilds
// valid flags from when the stored document is invalid.
func ListAuditFlags(ctx context.Context, q Querier) ([]AuditFlags, error) {
	rows, err := q.QueryContext(ctx, sqlAuditFlags)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AuditFlags
	for rows.Next() {
		var a AuditFlags
		if err := rows.Scan(&a.ID, &a.After); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
