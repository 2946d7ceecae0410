package controldb

import (
	"context"
	"database/sql"
	"time"
)

// The documents of rollout_flags, one row each: the flags document (id
// 1), and the kill switch document (id 2) of a fleet whose modes come
// from a source reservoir does not write (a flagd daemon, an OFREP
// endpoint, any OpenFeature provider). Writers (rollout/flagdoc's
// FlagsTable and KillTable) serialise on the row's lock; every replica
// polls the row it follows (rollout/flagsource).
const (
	sqlFlagsRead = `/*caller='flags'*/ SELECT version, document FROM rollout_flags WHERE id = ?`
	// sqlFlagsLock reads the document for a change, locking the row.
	sqlFlagsLock   = `/*caller='flags'*/ SELECT version, document FROM rollout_flags WHERE id = ? FOR UPDATE`
	sqlFlagsInsert = `/*caller='flags'*/ INSERT INTO rollout_flags (id, version, document, updated_at) VALUES (?, ?, ?, ?)`
	sqlFlagsUpdate = `/*caller='flags'*/ UPDATE rollout_flags SET version = ?, document = ?, updated_at = ? WHERE id = ?`
	// sqlFlagsPoll is what each replica polls: the row's version, and its
	// document unless the version is one of the two given (the version in
	// force and the one last refused; -1 for none).
	sqlFlagsPoll = `/*caller='flags'*/ SELECT version, IF(version IN (?, ?), NULL, document) FROM rollout_flags WHERE id = ?`
	// sqlFlagsWritten is the kill-flood bench's: when the writer stamped
	// the document.
	sqlFlagsWritten = `/*caller='bench'*/ SELECT version, updated_at FROM rollout_flags WHERE id = ?`
)

// Doc names a row of rollout_flags.
type Doc int

const (
	// FlagsDoc is the flags document: modes and kill switches.
	FlagsDoc Doc = 1
	// KillDoc is the kill switch document that wins over a mode source
	// reservoir does not write; its modes are never used.
	KillDoc Doc = 2
)

// ReadFlags returns the flags row: its version and the document as
// stored. sql.ErrNoRows: no document was ever written.
func ReadFlags(ctx context.Context, q Querier, d Doc) (version int64, doc string, err error) {
	err = q.QueryRowContext(ctx, sqlFlagsRead, d).Scan(&version, &doc)
	return version, doc, err
}

// LockFlags is ReadFlags under the row's lock (FOR UPDATE), for a
// read-modify-write: q is the writer's transaction, and the lock is held
// until it ends. sql.ErrNoRows: no document yet (then nothing is locked,
// and two writers may both try InsertFlags: one fails, IsDuplicate).
func LockFlags(ctx context.Context, q Querier, d Doc) (version int64, doc string, err error) {
	err = q.QueryRowContext(ctx, sqlFlagsLock, d).Scan(&version, &doc)
	return version, doc, err
}

// InsertFlags writes the first flags document, at version, stamped at.
// An error for which IsDuplicate holds: another writer created the row
// first.
func InsertFlags(ctx context.Context, q Querier, d Doc, version int64, doc string, at time.Time) error {
	_, err := q.ExecContext(ctx, sqlFlagsInsert, d, version, doc, at)
	return err
}

// UpdateFlags replaces the flags document with doc, at version, stamped
// at. It does not look at the document it replaces: call it under
// LockFlags.
func UpdateFlags(ctx context.Context, q Querier, d Doc, version int64, doc string, at time.Time) error {
	_, err := q.ExecContext(ctx, sqlFlagsUpdate, version, doc, at, d)
	return err
}

// PollFlags is a replica's poll of the flags row: one primary-key read
// that returns the row's version, and its document only when that
// version is neither inForce nor refused (-1 for none): doc is NULL
// (Valid false) for a version the poller has already seen, so a fleet's
// polls carry the document only when it changed. sql.ErrNoRows: no
// document yet.
func PollFlags(ctx context.Context, q Querier, d Doc, inForce, refused int64) (version int64, doc sql.NullString, err error) {
	err = q.QueryRowContext(ctx, sqlFlagsPoll, inForce, refused, d).Scan(&version, &doc)
	return version, doc, err
}

// FlagsWritten returns the flags row's version and when its writer
// stamped it (updated_at), for the kill-flood bench's time from the
// write to the fleet's obedience. sql.ErrNoRows: no document yet.
func FlagsWritten(ctx context.Context, q Querier, d Doc) (version int64, updatedAt time.Time, err error) {
	err = q.QueryRowContext(ctx, sqlFlagsWritten, d).Scan(&version, &updatedAt)
	return version, updatedAt, err
}
