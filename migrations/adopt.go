package migrations

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pressly/goose/v3/database"
)

// adopt moves a database migrated with the single set to sets (see Up):
// nothing when it has no goose_db_version, or one that records nothing.
func adopt(ctx context.Context, db *sql.DB, sets []*Set, res *Result) error {
	legacy, _, err := applied(ctx, db, legacyStore)
	if err != nil || len(legacy) == 0 {
		return err
	}
	for v := range legacy {
		if v > LegacyLatest {
			return fmt.Errorf("migrations: %s records version %d, and the single set ended at %d: "+
				"this binary does not know what that database holds; nothing was changed", LegacyTable, v, LegacyLatest)
		}
	}
	present, err := tablesIn(ctx, db)
	if err != nil {
		return err
	}
	for _, s := range all {
		own, _, err := applied(ctx, db, s.store)
		if err != nil {
			return err
		}
		if len(own) > 0 {
			continue // the set's own table has it: adopted, or migrated by this binary
		}
		if slices.Contains(sets, s) {
			err = s.adopt(ctx, db, legacy, present, res)
		} else {
			err = s.leftovers(ctx, db, present, res)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// tablesIn lists the base tables of db's current database.
func tablesIn(ctx context.Context, db *sql.DB) (map[string]bool, error) {
	const q = `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'`
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("migrations: list tables: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("migrations: list tables: %w", err)
		}
		out[t] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: list tables: %w", err)
	}
	return out, nil
}

// adopt records in s's version table the versions of s that
// goose_db_version records, when the tables they created are there.
func (s *Set) adopt(ctx context.Context, db *sql.DB, legacy map[int64]bool, present map[string]bool, res *Result) error {
	var versions []int64
	var want, missing []string
	for _, v := range s.versions {
		if v <= LegacyLatest && legacy[v] {
			versions = append(versions, v)
			for _, t := range s.created[v] {
				want = append(want, t)
				if !present[t] {
					missing = append(missing, t)
				}
			}
		}
	}
	switch {
	case len(versions) == 0 || len(missing) == len(want):
		// None of the set's tables: never made, or dropped as another
		// role's empty leftovers by an earlier run. Migrated from scratch.
		return nil
	case len(missing) > 0:
		return fmt.Errorf("migrations: %s set: %s records versions %s, but of the tables they create the database lacks %s: "+
			"reservoir does not guess what happened to them; restore them, or drop the others and migrate again",
			s.name, LegacyTable, joinVersions(versions), strings.Join(missing, ", "))
	}
	_, exists, err := applied(ctx, db, s.store)
	if err != nil {
		return err
	}
	if !exists {
		// As goose makes it: the table and its version 0. MySQL commits
		// DDL at once, so this is a step of its own; a failure after it
		// leaves a table recording nothing, which the next run adopts.
		if err := s.store.CreateVersionTable(ctx, db); err != nil {
			return fmt.Errorf("migrations: %s set: create %s: %w", s.name, s.table, err)
		}
		if err := s.store.Insert(ctx, db, database.InsertRequest{Version: 0}); err != nil {
			return fmt.Errorf("migrations: %s set: create %s: %w", s.name, s.table, err)
		}
	}
	// The versions in one transaction: all recorded, or none.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrations: %s set: adopt: %w", s.name, err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, v := range versions {
		if err := s.store.Insert(ctx, tx, database.InsertRequest{Version: v}); err != nil {
			return fmt.Errorf("migrations: %s set: record version %d in %s: %w", s.name, v, s.table, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrations: %s set: adopt: %w", s.name, err)
	}
	for _, v := range versions {
		res.Adopted = append(res.Adopted, Version{Set: s, Version: v})
	}
	return nil
}

// callerTag starts the statements that decide on another role's tables,
// in the stores' SQLCommenter form, so an operator (and a test) can tell
// them in the processlist.
const callerTag = "/*caller='migrate_leftovers'*/ "

// lockWait bounds how long leftovers waits for a table lock (seconds): a
// session holding one of the tables (an older replica's transaction) makes
// the migration fail with the lock-wait error instead of hanging.
const lockWait = 30

// leftovers drops the single set's tables of s, a set the database does
// not hold, if every one is empty; otherwise it keeps them all. The check
// and the drop happen under a write lock on every one of them, so a row
// written meanwhile (by a binary of an earlier release) is either seen,
// and the tables kept, or waits and fails on the dropped table.
func (s *Set) leftovers(ctx context.Context, db *sql.DB, present map[string]bool, res *Result) (err error) {
	var tables []string
	for _, t := range s.LegacyTables() {
		if present[t] {
			tables = append(tables, t)
		}
	}
	if len(tables) == 0 {
		return nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrations: %s tables: %w", s.name, err)
	}
	defer conn.Close()
	// The session's settings and locks end with the connection: it is not
	// returned to the pool.
	defer func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // the pool closes it
	}()
	if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = ?", lockWait); err != nil {
		return fmt.Errorf("migrations: %s tables: %w", s.name, err)
	}
	quoted := make([]string, len(tables))
	locks := make([]string, len(tables))
	for i, t := range tables {
		quoted[i] = "`" + t + "`"
		locks[i] = quoted[i] + " WRITE"
	}
	if _, err := conn.ExecContext(ctx, callerTag+"LOCK TABLES "+strings.Join(locks, ", ")); err != nil { //sqlcheck:ok table names cannot be parameters; these are the embedded migrations' own
		return fmt.Errorf("migrations: lock the %s tables: %w", s.name, err)
	}
	defer func() {
		if _, uerr := conn.ExecContext(context.WithoutCancel(ctx), "UNLOCK TABLES"); uerr != nil && err == nil {
			err = fmt.Errorf("migrations: unlock the %s tables: %w", s.name, uerr)
		}
	}()
	var notEmpty []string
	for i, t := range tables {
		var one int
		err := conn.QueryRowContext(ctx, callerTag+"SELECT 1 FROM "+quoted[i]+" LIMIT 1").Scan(&one) //sqlcheck:ok a table name cannot be a parameter; one of the embedded migrations'
		switch {
		case err == nil:
			notEmpty = append(notEmpty, t)
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("migrations: read %s: %w", t, err)
		}
	}
	if len(notEmpty) > 0 {
		res.Leftovers = append(res.Leftovers, Leftover{Set: s, Tables: tables, NotEmpty: notEmpty})
		return nil
	}
	if _, err := conn.ExecContext(ctx, callerTag+"DROP TABLE "+strings.Join(quoted, ", ")); err != nil { //sqlcheck:ok table names cannot be parameters; these are the embedded migrations' own
		return fmt.Errorf("migrations: drop the empty %s tables %s: %w", s.name, strings.Join(tables, ", "), err)
	}
	res.Leftovers = append(res.Leftovers, Leftover{Set: s, Tables: tables, Dropped: true})
	return nil
}

// joinVersions formats versions as `reservoir migrate` prints them.
func joinVersions(vs []int64) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprintf("%05d", v)
	}
	return strings.Join(out, ", ")
}
